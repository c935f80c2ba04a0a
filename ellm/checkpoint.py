"""Checkpoints: state_dicts plus plain metadata, written to a temp file and renamed.

A checkpoint is one ``torch.save`` file holding ``{"format": 1, "agent": <agent.state_dict()>,
"meta": {...}}`` where ``meta`` holds only plain Python values (counters, RNG states, the
resolved config without secrets, library versions). It is loaded with ``weights_only=True``:
no live objects are pickled, so checkpoints survive library upgrades.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ellm.files import atomic_write

FORMAT = 1
SNAPSHOT_NAME = "snapshot.pt"
EMBEDDINGS_NAME = "text_embeddings.npz"
"""Beside the snapshot, with ``save_buffer``: the agent's cache of frozen text embeddings
(:meth:`ellm.embed.EmbeddingCache.save`), so that a resumed run does not encode its replay again."""


class CheckpointError(ValueError):
    """A checkpoint path or file that cannot be used."""


def save(path: str | Path, agent_state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write atomically: a crash leaves either the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, sync_dir=True) as f:
        torch.save({"format": FORMAT, "agent": agent_state, "meta": meta}, f)
    return path


def resolve(path: str | Path, key: str) -> Path:
    """A snapshot file from a run dir or a file path; ``key`` names the config key in errors."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / SNAPSHOT_NAME
    if not path.is_file():
        raise CheckpointError(f"{key}: no snapshot at {str(path)!r} (expected a run directory "
                              f"holding {SNAPSHOT_NAME} or a snapshot file)")
    return path


def load(path: str | Path, key: str = "snapshot_path") -> tuple[dict[str, Any], dict[str, Any]]:
    """(agent state, meta) from a checkpoint file or run dir."""
    path = resolve(path, key)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a bad file
        raise CheckpointError(f"{key}: cannot read snapshot {str(path)!r}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{key}: {str(path)!r} is not an ellm snapshot (format {FORMAT})")
    return data["agent"], data["meta"]


def seed_everything(seed: int) -> None:
    """Seed the process-wide streams: Python's, NumPy's and torch's."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """The process-wide random streams as plain data (a snapshot's ``rng``)."""
    np_state = np.random.get_state()
    return {
        "python": list(random.getstate()[1]), "python_pos": random.getstate()[2],
        "numpy": {"keys": np_state[1].tolist(), "pos": int(np_state[2])},
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate((3, tuple(state["python"]), state["python_pos"]))
    keys = np.array(state["numpy"]["keys"], dtype=np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy"]["pos"], 0, 0.0))
    torch.set_rng_state(state["torch"])
