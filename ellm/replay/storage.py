"""Episode files: the on-disk format, atomic writes, and the main-process ReplayStorage.

An episode of T steps is one compressed ``{index:06d}_{T}.npz`` file holding T + 1 entries:
entry 0 is the reset observation (action 0, reward 0, discount 1), entry t in 1..T holds obs_t,
the action a_t taken in obs_{t-1}, reward r_t and discount d_t (0 iff the episode terminated at
step t). Arrays: ``frame`` uint8 [T+1, H, W] (one grayscale frame per step, not stacked),
``action`` int32, ``reward`` float32 (what the run trains on: the LM reward, or the game reward
for ``CrafterReward-v1``), ``discount`` float32, ``text_obs`` and ``goal`` int32 ids into a
:class:`~ellm.replay.strings.StringTable`, ``game_reward`` float32 (the environment's own reward,
kept beside ``reward`` so that baselines can add it to their intrinsic reward).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ellm.files import atomic_write
from ellm.replay.strings import StringTable

EPISODE_DTYPES: dict[str, type] = {
    "frame": np.uint8,
    "action": np.int32,
    "reward": np.float32,
    "discount": np.float32,
    "text_obs": np.int32,
    "goal": np.int32,
    "game_reward": np.float32,
}
_EPISODE_NAME = re.compile(r"^(\d+)_(\d+)\.npz$")
_TMP_SUFFIX = ".tmp"  # temp files are ".{final name}.tmp": they never match _EPISODE_NAME


@dataclass(frozen=True)
class EpisodeFile:
    index: int
    length: int  # T, the number of transitions
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
    """Main process: collects the current episode and writes it as one file when it ends.

    ``num_episodes``/``num_transitions`` count the episode files found in ``replay_dir`` at start
    plus those written since; numbering continues after the highest index found. Leftover temp
    files of a killed run are deleted.
    """

    def __init__(self, replay_dir: Path, strings: StringTable) -> None:
        self.replay_dir = Path(replay_dir)
        self.replay_dir.mkdir(parents=True, exist_ok=True)
        self.strings = strings
        for tmp in self.replay_dir.glob(f".*.npz{_TMP_SUFFIX}"):
            tmp.unlink()
        files = list_episode_files(self.replay_dir)
        self._next_index = files[-1].index + 1 if files else 0
        self.num_episodes = len(files)
        self.num_transitions = sum(f.length for f in files)
        self._current: dict[str, list] | None = None

    @property
    def in_episode(self) -> bool:
        """True between :meth:`add_first` and the ``add(..., last=True)`` that ends the episode."""
        return self._current is not None

    def add_first(self, frame: np.ndarray, text_obs: str, goal: str) -> None:
        """Start an episode with its reset observation (a uint8 [H, W] grayscale frame)."""
        if self._current is not None:
            n = len(self._current["frame"]) - 1
            raise RuntimeError(f"add_first while an episode is open ({n} steps, not ended by last)")
        frame = self._check_frame(frame, None)
        self._current = {
            "frame": [frame],
            "action": [0],
            "reward": [0.0],
            "discount": [1.0],
            "text_obs": [self.strings.id(text_obs)],
            "goal": [self.strings.id(goal)],
            "game_reward": [0.0],
        }

    def add(
        self,
        frame: np.ndarray,
        action: int,
        reward: float,
        discount: float,
        text_obs: str,
        goal: str,
        last: bool,
        game_reward: float | None = None,
    ) -> None:
        """Append one step. ``discount`` is 0.0 iff the episode terminated at this step;
        ``last`` ends the episode (termination or truncation) and writes its file;
        ``game_reward`` is the environment's reward when ``reward`` is another one (None: the
        same as ``reward``)."""
        ep = self._current
        if ep is None:
            raise RuntimeError("add before add_first")
        if not 0.0 <= discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1], got {discount}")
        ep["frame"].append(self._check_frame(frame, ep["frame"][0].shape))
        ep["action"].append(int(action))
        ep["reward"].append(float(reward))
        ep["discount"].append(float(discount))
        ep["text_obs"].append(self.strings.id(text_obs))
        ep["goal"].append(self.strings.id(goal))
        ep["game_reward"].append(float(reward if game_reward is None else game_reward))
        if last:
            self._current = None
            self._write(ep)

    @staticmethod
    def _check_frame(frame: np.ndarray, shape: tuple[int, ...] | None) -> np.ndarray:
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 2 or (shape and frame.shape != shape):
            want = f"uint8 {shape}" if shape else "a uint8 [H, W] grayscale frame"
            raise ValueError(f"expected {want}, got {frame.dtype} {frame.shape}")
        return frame.copy()  # the env may reuse its buffer

    def _write(self, ep: dict[str, list]) -> None:
        episode = {k: np.asarray(ep[k], dtype=dtype) for k, dtype in EPISODE_DTYPES.items()}
        length = len(ep["frame"]) - 1
        self.strings.sync()  # every id in the file must be on disk first
        save_episode(self.replay_dir / episode_filename(self._next_index, length), episode)
        self._next_index += 1
        self.num_episodes += 1
        self.num_transitions += length
