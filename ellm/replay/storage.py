"""Episode files: the on-disk format, atomic writes, and the main-process ReplayStorage.

An episode of T steps is one ``{index:06d}_{T}.npz`` of T + 1 entries (0: the reset; t: obs_t,
a_t, r_t, d_t = 0 iff it terminated at t), one grayscale frame per step.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ellm.replay.strings import StringTable
from ellm.run.atomic import atomic_write

EPISODE_DTYPES: dict[str, type] = {
    "frame": np.uint8,
    "action": np.int32,
    "reward": np.float32,
    "discount": np.float32,
    "text_obs": np.int32,
    "goal": np.int32,
}
_EPISODE_NAME = re.compile(r"^(\d+)_(\d+)\.npz$")
_TMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class EpisodeStart:
    """An episode's reset observation: entry 0 of its file."""

    frame: np.ndarray
    text: str
    goal: str


@dataclass(frozen=True)
class Row:
    """One step as the replay stores it (see the module docstring)."""

    frame: np.ndarray
    action: int
    reward: float
    discount: float
    text: str
    goal: str
    last: bool


@dataclass(frozen=True)
class EpisodeFile:
    index: int
    length: int
    path: Path


def episode_filename(index: int, length: int) -> str:
    return f"{index:06d}_{length}.npz"


def list_episode_files(replay_dir: Path) -> list[EpisodeFile]:
    """The finished episode files in ``replay_dir``, sorted by index (temp files are ignored)."""
    files = []
    with os.scandir(replay_dir) as it:
        for entry in it:
            m = _EPISODE_NAME.match(entry.name)
            if m:
                files.append(EpisodeFile(int(m[1]), int(m[2]), Path(entry.path)))
    files.sort(key=lambda f: f.index)
    return files


def drop_episodes_from(replay_dir: Path, index: int) -> list[EpisodeFile]:
    """Delete the episode files numbered ``index`` or later; returns them.

    A resumed run calls it with the count its snapshot recorded: episodes a killed run wrote
    after its last snapshot come from frames the resumed run collects again."""
    dropped = [f for f in list_episode_files(replay_dir) if f.index >= index]
    for f in dropped:
        f.path.unlink()
    return dropped


def save_episode(path: Path, episode: dict[str, np.ndarray]) -> None:
    """Write ``episode`` to ``path`` atomically: a temp file, fsync, rename, fsync of the dir."""
    path = Path(path)
    with atomic_write(path, tmp=path.with_name(f".{path.name}{_TMP_SUFFIX}"), sync_dir=True) as f:
        np.savez_compressed(f, **episode)


def load_episode(path: Path) -> dict[str, np.ndarray]:
    """Read and check one episode file; raises ``ValueError`` naming the file if it is bad."""
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [key for key in EPISODE_DTYPES if key not in data.files]
            if missing:
                raise ValueError(f"no {missing} arrays (written by an older ellm version?)")
            episode = {key: data[key] for key in EPISODE_DTYPES}
    except (OSError, KeyError, ValueError, EOFError) as e:
        raise ValueError(f"cannot read replay episode file {path}: {e}") from e
    n = len(episode["frame"])
    for key, dtype in EPISODE_DTYPES.items():
        a = episode[key]
        if a.dtype != dtype or len(a) != n or (key != "frame" and a.ndim != 1):
            raise ValueError(f"{path}: bad array {key!r}: {a.dtype} {a.shape} (T + 1 = {n})")
    m = _EPISODE_NAME.match(Path(path).name)
    if m and int(m[2]) != n - 1:
        raise ValueError(f"{path}: the name says {m[2]} steps, the file holds {n - 1}")
    return episode


class ReplayStorage:
    """Main process: writes each episode when it ends; one open when the run stops is dropped."""

    def __init__(self, replay_dir: Path, strings: StringTable, first_index: int = 0) -> None:
        self.replay_dir = Path(replay_dir)
        self.replay_dir.mkdir(parents=True, exist_ok=True)
        self.strings = strings
        for tmp in self.replay_dir.glob(f".*.npz{_TMP_SUFFIX}"):
            tmp.unlink()
        files = list_episode_files(self.replay_dir)
        # A resumed run numbers on from its snapshot's count even where older files were
        # deleted, so a later resume from the same snapshot still tells its episodes apart.
        self._next_index = max(files[-1].index + 1 if files else 0, first_index)
        self.num_episodes = len(files)
        self.num_transitions = sum(f.length for f in files)
        self._open: dict[int, dict[str, list]] = {}

    @property
    def episodes_written(self) -> int:
        """The number the next episode file gets: every episode this run wrote, kept or not."""
        return self._next_index

    def add_first(self, start: EpisodeStart, source: int = 0) -> None:
        """Open an episode of ``source`` with its reset observation."""
        if source in self._open:
            n = len(self._open[source]["frame"]) - 1
            raise RuntimeError(f"add_first while an episode of source {source} is open "
                               f"({n} steps, not ended by last)")
        self._open[source] = {
            "frame": [self._check_frame(start.frame, None)],
            "action": [0],
            "reward": [0.0],
            "discount": [1.0],
            "text_obs": [self.strings.id(start.text)],
            "goal": [self.strings.id(start.goal)],
        }

    def add(self, row: Row, source: int = 0) -> None:
        """Append one step to ``source``'s open episode; ``row.last`` writes its file."""
        ep = self._open.get(source)
        if ep is None:
            raise RuntimeError(f"add before add_first (source {source})")
        if not 0.0 <= row.discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1], got {row.discount}")
        ep["frame"].append(self._check_frame(row.frame, ep["frame"][0].shape))
        ep["action"].append(int(row.action))
        ep["reward"].append(float(row.reward))
        ep["discount"].append(float(row.discount))
        ep["text_obs"].append(self.strings.id(row.text))
        ep["goal"].append(self.strings.id(row.goal))
        if row.last:
            del self._open[source]
            self._write(ep)

    @staticmethod
    def _check_frame(frame: np.ndarray, shape: tuple[int, ...] | None) -> np.ndarray:
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 2 or (shape and frame.shape != shape):
            want = f"uint8 {shape}" if shape else "a uint8 [H, W] grayscale frame"
            raise ValueError(f"expected {want}, got {frame.dtype} {frame.shape}")
        return frame.copy()

    def _write(self, ep: dict[str, list]) -> None:
        episode = {k: np.asarray(ep[k], dtype=dtype) for k, dtype in EPISODE_DTYPES.items()}
        length = len(ep["frame"]) - 1
        self.strings.sync()  # every id in the file must be on disk first
        save_episode(self.replay_dir / episode_filename(self._next_index, length), episode)
        self._next_index += 1
        self.num_episodes += 1
        self.num_transitions += length
