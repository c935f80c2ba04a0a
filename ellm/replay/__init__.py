"""Replay: episodes as compressed files in the run dir, n-step batches sampled from them."""

import importlib
from typing import Any

from ellm.replay.storage import (
    EpisodeStart,
    ReplayStorage,
    Row,
    drop_episodes_from,
    list_episode_files,
    load_episode,
)
from ellm.replay.strings import StringTable

# torch takes seconds to import and only sampling needs it: loaded on first use (PEP 562).
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


__all__ = [
    "Batch",
    "EpisodeShard",
    "EpisodeStart",
    "ReplayStorage",
    "Row",
    "StringTable",
    "drop_episodes_from",
    "list_episode_files",
    "load_episode",
    "make_replay_loader",
    "nstep_targets",
]
assert set(_LAZY) <= set(__all__)
