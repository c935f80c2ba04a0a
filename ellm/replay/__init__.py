"""Replay: episodes as compressed files in the run dir, n-step batches sampled from them.

- :class:`StringTable`: texts (observations, goals) stored once, referenced by int ids.
- :class:`ReplayStorage`: the main process appends :class:`Row` s and writes each finished
  episode.
- :func:`make_replay_loader`: endless :class:`Batch` es, in-process or from DataLoader workers
  that each hold a disjoint shard of the episodes.
"""

import importlib
from typing import Any

from ellm.replay.storage import EpisodeStart, ReplayStorage, Row, list_episode_files, load_episode
from ellm.replay.strings import StringTable

# The sampling side needs torch (seconds to import); the storage side does not, so tools that
# only write or read episode files skip it: these names are imported on first use (PEP 562).
_LAZY = {
    "Batch": "ellm.replay.sampling",
    "EpisodeShard": "ellm.replay.sampling",
    "nstep_targets": "ellm.replay.sampling",
    "make_replay_loader": "ellm.replay.loader",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [  # the names of _LAZY spelled out, so that linters see strings
    "Batch",
    "EpisodeShard",
    "EpisodeStart",
    "ReplayStorage",
    "Row",
    "StringTable",
    "list_episode_files",
    "load_episode",
    "make_replay_loader",
    "nstep_targets",
]
assert set(_LAZY) <= set(__all__)
