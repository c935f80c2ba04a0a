"""n-step transitions from episodes held in RAM: the Batch type, the maths, EpisodeShard.

Frame stacks are rebuilt from one stored frame per step, a batch at a time with numpy slicing.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

_ACTION, _REWARD, _DISCOUNT, _TEXT, _GOAL = range(5)


class Batch(NamedTuple):
    """A batch of n-step transitions; with k = min(nstep, T-i+1) at step i, ``reward`` sums k
    discounted (clipped) rewards, ``discount`` is gamma^k times the window's discounts (0 once
    it terminates; gamma^k after a truncation), and ``window_text_obs`` holds every text id
    of the window.
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    discount: np.ndarray
    next_obs: np.ndarray
    text_obs: np.ndarray
    next_text_obs: np.ndarray
    goal: np.ndarray
    next_goal: np.ndarray
    n_steps: np.ndarray  # k: the reward steps summed (nstep, or fewer at the end)
    # obs's one-step successor (ICM); None unless make_replay_loader(one_step_next_obs=True)
    one_step_next_obs: np.ndarray | None = None
    window_text_obs: np.ndarray | None = None


def nstep_targets(
    rewards: np.ndarray, discounts: np.ndarray, k: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """n-step reward and bootstrap discount from the first ``k`` steps of each window."""
    n = rewards.shape[1]
    used = np.arange(n) < k[:, None]
    d = np.where(used, discounts, 1.0)
    alive = np.cumprod(np.concatenate([np.ones_like(d[:, :1]), d[:, :-1]], axis=1), axis=1)
    reward = (gamma ** np.arange(n) * alive * np.where(used, rewards, 0.0)).sum(axis=1)
    discount = gamma ** k.astype(np.float64) * d.prod(axis=1)
    return reward.astype(np.float32), discount.astype(np.float32)


class _Episode:
    __slots__ = ("frame", "index", "length", "small")

    def __init__(self, index: int, episode: dict[str, np.ndarray], nstep: int, clip: bool):
        self.index = index
        self.length = len(episode["frame"]) - 1
        self.frame = episode["frame"]
        reward = episode["reward"].astype(np.float64)
        small = np.zeros((self.length + 1 + nstep, 5), np.float64)
        small[: self.length + 1] = np.stack(
            [
                episode["action"],
                np.clip(reward, -1.0, 1.0) if clip else reward,
                episode["discount"],
                episode["text_obs"],
                episode["goal"],
            ],
            axis=1,
        )
        self.small = small


def stack_into(out: np.ndarray, frames: np.ndarray, t: int) -> None:
    """out[:] = frames t-S+1..t, the first frame repeated for indices before 0."""
    lo = t + 1 - len(out)
    if lo >= 0:
        out[:] = frames[lo : t + 1]
    else:
        out[:-lo] = frames[0]
        out[-lo:] = frames[: t + 1]


class EpisodeShard:
    """Episodes held in RAM by one sampler, oldest dropped beyond ``capacity`` transitions."""

    def __init__(self, capacity: int, nstep: int, clip_reward: bool,
                 per_episode: bool = False) -> None:
        if capacity < 1 or nstep < 1:
            raise ValueError(f"capacity and nstep must be >= 1, got {capacity}, {nstep}")
        self.capacity, self.nstep, self.clip_reward = capacity, nstep, clip_reward
        # per_episode: the original's draw (an episode, then a step); else uniform over transitions.
        self.per_episode = per_episode
        self._episodes: list[_Episode] = []
        self.num_transitions = 0
        self._ends = np.zeros(0, np.int64)

    @property
    def ends(self) -> np.ndarray:
        """Transitions held up to the end of each episode, oldest first (their cumulative sum):
        transition ``u`` lies in episode ``searchsorted(ends, u, side="right")``."""
        return self._ends

    @property
    def episode_indices(self) -> list[int]:
        return [ep.index for ep in self._episodes]

    @property
    def nbytes(self) -> int:
        """Bytes of array data held (frames plus the per-step scalars)."""
        return sum(ep.frame.nbytes + ep.small.nbytes for ep in self._episodes)

    def add(self, index: int, episode: dict[str, np.ndarray]) -> list[int]:
        """Add an episode; returns the indices of the episodes evicted to make room."""
        new = _Episode(index, episode, self.nstep, self.clip_reward)
        evicted = []
        while self._episodes and self.num_transitions + new.length > self.capacity:
            old = self._episodes.pop(0)
            self.num_transitions -= old.length
            evicted.append(old.index)
        self._episodes.append(new)
        self.num_transitions += new.length
        self._ends = np.cumsum([ep.length for ep in self._episodes], dtype=np.int64)
        return evicted

    def sample(
        self,
        rng: np.random.Generator,
        batch_size: int,
        frame_stack: int,
        gamma: float,
        one_step_next_obs: bool = False,
        frames_out: np.ndarray | None = None,
    ) -> Batch:
        """A batch drawn with replacement, uniformly over transitions or (``per_episode``) episodes.
        One block for all frame stacks keeps the allocator from re-faulting its pages.
        """
        if not self._episodes:
            raise RuntimeError("sampling from an empty episode shard")
        if self.per_episode:
            e = rng.integers(0, len(self._episodes), size=batch_size)
            lengths = np.diff(self._ends, prepend=0)[e]
            i = rng.integers(0, np.maximum(1, lengths - self.nstep + 1)) + 1
        else:
            u = rng.integers(0, self.num_transitions, size=batch_size)
            e = np.searchsorted(self._ends, u, side="right")
            lengths = np.diff(self._ends, prepend=0)[e]
            i = u - self._ends[e] + lengths + 1
        k = np.minimum(self.nstep, lengths - i + 1)
        ends = [i - 1, i - 1 + k] + ([i] if one_step_next_obs else [])
        if frames_out is None:
            h, w = self._episodes[0].frame.shape[1:]
            frames_out = np.empty((len(ends), batch_size, frame_stack, h, w), np.uint8)
        frames = list(frames_out)
        win = np.empty((batch_size, self.nstep + 1, 5), np.float64)
        lists = [t.tolist() for t in ends]
        for b, (eb, ib) in enumerate(zip(e.tolist(), i.tolist())):
            ep = self._episodes[eb]
            for out, t in zip(frames, lists):
                stack_into(out[b], ep.frame, t[b])
            win[b] = ep.small[ib - 1 : ib + self.nstep]
        reward, discount = nstep_targets(win[:, 1:, _REWARD], win[:, 1:, _DISCOUNT], k, gamma)
        rows = np.arange(batch_size)
        ids = win.astype(np.int64)
        window = np.minimum(np.arange(self.nstep + 1), k[:, None])
        return Batch(
            obs=frames[0],
            action=ids[:, 1, _ACTION],
            reward=reward,
            discount=discount,
            next_obs=frames[1],
            text_obs=ids[:, 0, _TEXT],
            next_text_obs=ids[rows, k, _TEXT],
            goal=ids[:, 0, _GOAL],
            next_goal=ids[rows, k, _GOAL],
            n_steps=k.astype(np.int64),
            one_step_next_obs=frames[2] if one_step_next_obs else None,
            window_text_obs=ids[rows[:, None], window, _TEXT],
        )
