"""Checkpoints: state_dicts plus plain metadata, written to a temp file and renamed.

Loaded with ``weights_only=True``: no live objects are pickled, so checkpoints survive library
upgrades.
"""

from __future__ import annotations

import math
import random
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ellm.run.atomic import atomic_write

FORMAT = 1
SNAPSHOT_NAME = "snapshot.pt"
EMBEDDINGS_NAME = "text_embeddings.npz"
"""Beside the snapshot, with ``save_buffer``: the agent's cache of frozen text embeddings
(:meth:`ellm.embed.EmbeddingCache.save`), so that a resumed run does not encode its replay again."""


class CheckpointError(ValueError):
    """A checkpoint path or file that cannot be used."""


@dataclass
class RunCounters:
    """Where a run is, which a snapshot restores with the agent: frames and episodes done, the
    rewards summed and the frame they reached 1 (``train_after_reward`` and
    ``decay_after_reward`` wait for it, as the original did), each actor's env episodes."""

    frame: int = 0
    episode: int = 0
    cumulative_reward: float = 0.0
    first_reward_frame: int | None = None
    actor_env_episodes: list[int] = field(default_factory=list)

    def count(self, reward: float) -> bool:
        """One more frame and its reward; True at the frame the summed rewards reach 1."""
        self.frame += 1
        self.cumulative_reward += reward
        if self.first_reward_frame is None and self.cumulative_reward >= 1:
            self.first_reward_frame = self.frame
            return True
        return False

    def meta(self) -> dict[str, Any]:
        return asdict(self)  # copies the list: the snapshot keeps the values of its frame

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> RunCounters:
        first = meta.get("first_reward_frame")
        return cls(int(meta["frame"]), int(meta["episode"]),
                   float(meta.get("cumulative_reward", 0.0)),
                   None if first is None else int(first),
                   [int(n) for n in meta.get("actor_env_episodes", [])])


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


def load(path: str | Path, key: str = "snapshot_path", *,
         mmap: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(agent state, meta) from a checkpoint file or run dir; ``mmap`` maps the tensors instead
    of reading them (:func:`check`)."""
    path = resolve(path, key)
    expected = f"expected the {SNAPSHOT_NAME} that python train.py writes, a PyTorch zip archive"
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{key}: {str(path)!r} is not a snapshot ({expected}); it starts "
                              f"with {_start(path)}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:
        raise CheckpointError(f"{key}: {str(path)!r} is a zip archive but not a snapshot "
                              f"({expected}): {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{key}: {str(path)!r} is a PyTorch file but not a snapshot "
                              f"({expected}, format {FORMAT})")
    if not isinstance(data.get("agent"), dict):
        raise CheckpointError(f"{key}: {str(path)!r} holds no agent state (a dict)")
    check_meta(data.get("meta"), f"{key}: snapshot {str(path)!r}")
    return data["agent"], data["meta"]


def check(path: str | Path, key: str) -> Path:
    """The snapshot file of ``path``, checked whole before a run starts at the cost of its
    pickle only (the tensors are mapped, not read)."""
    load(path, key, mmap=True)
    return resolve(path, key)


def _start(path: Path, size: int = 24) -> str:
    with path.open("rb") as f:
        head = f.read(size)
    try:
        return f"the text {head.decode('utf-8')!r}"
    except UnicodeDecodeError:
        return f"the bytes {head!r}"


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2 ** 63


def _finite(v: Any, low: float = -math.inf) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            and v >= low)


def _rng(v: Any) -> bool:
    if not isinstance(v, dict):
        return False
    python, numpy = v.get("python"), v.get("numpy")
    return (isinstance(python, list) and len(python) == 625 and all(map(_count, python))
            and (v.get("python_pos") is None or _finite(v["python_pos"]))
            and isinstance(numpy, dict)
            and isinstance(numpy.get("keys"), list) and len(numpy["keys"]) == 624
            and all(_count(k) and k < 2 ** 32 for k in numpy["keys"])
            and _count(numpy.get("pos")) and numpy["pos"] <= 624
            and isinstance(v.get("torch"), torch.Tensor) and v["torch"].dtype == torch.uint8)


# Each field a snapshot's meta may hold; older snapshots may lack the later ones.
META_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "frame": ("a whole number >= 0", _count),
    "episode": ("a whole number >= 0", _count),
    "first_reward_frame": ("null or a whole number >= 0", lambda v: v is None or _count(v)),
    "cumulative_reward": ("a finite number", _finite),
    "method": ("a string", lambda v: isinstance(v, str)),
    "game": ("a string", lambda v: isinstance(v, str)),
    "config": ("a mapping", lambda v: isinstance(v, dict)),
    "versions": ("a mapping", lambda v: isinstance(v, dict)),
    "rng": ("the random streams' state (Python's 625 words, NumPy's 624 keys, torch's bytes)",
            _rng),
    "env_episodes": ("a mapping of env names to whole numbers >= 0",
                     lambda v: isinstance(v, dict) and all(
                         isinstance(k, str) and _count(n) for k, n in v.items())),
    "replay_episodes": ("a whole number >= 0 (the episode files written)", _count),
    "actor_env_episodes": ("a list of whole numbers >= 0",
                           lambda v: isinstance(v, list) and all(map(_count, v))),
    # A negative, infinite or NaN amount would lift the LM budget to any amount.
    "lm_spent": ("a finite number >= 0 (dollars)", lambda v: _finite(v, 0.0)),
    "lm_metrics": ("a mapping of counter names to finite numbers >= 0",
                   lambda v: isinstance(v, dict) and all(
                       isinstance(k, str) and _finite(n, 0.0) for k, n in v.items())),
}
REQUIRED_META = ("frame", "episode", "rng")


def check_meta(meta: Any, where: str) -> None:
    """CheckpointError naming the field for meta that a snapshot does not write."""
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where}: its meta is not a mapping")
    for name in REQUIRED_META:
        if name not in meta:
            raise CheckpointError(f"{where}: meta field {name!r} is missing")
    for name, (expected, ok) in META_FIELDS.items():
        if name in meta and not ok(meta[name]):
            shown = repr(meta[name])
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise CheckpointError(f"{where}: meta field {name!r} is {shown}: expected {expected}")
    frame, first = meta["frame"], meta.get("first_reward_frame")
    if first is not None and first > frame:
        raise CheckpointError(f"{where}: meta field 'first_reward_frame' is {first}: expected "
                              f"at most the snapshot's frame ({frame})")


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
