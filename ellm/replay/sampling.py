"""n-step transitions from episodes held in RAM: the Batch type, the maths, EpisodeShard.

Frame stacks are rebuilt here from one stored frame per step; a whole batch is built with
numpy slicing (no per-sample collation).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Columns of an episode's float64 "small" array (exact for int ids below 2**53).
_ACTION, _REWARD, _DISCOUNT, _TEXT, _GOAL, _GAME = range(6)


class Batch(NamedTuple):
    """A batch of n-step transitions (numpy in the samplers, torch tensors from the loader).

    For a sample at step i of an episode of T steps (1 <= i <= T), with k = min(nstep, T-i+1):
    ``obs`` is the stack of frames i-S..i-1 (S = frame_stack, the episode's first frame repeated
    before its start), ``action`` a_i, ``reward`` sum_{j<k} gamma^j prod_{l<j} d_{i+l} r_{i+j}
    (r clipped to [-1, 1] if clip_reward), ``discount`` gamma^k prod_{l<k} d_{i+l} (0 once the
    window holds a termination; gamma^k after a truncation), ``next_obs`` the stack ending at
    i-1+k. Text and goal are StringTable ids at i-1 and i-1+k. ``game_reward`` is the n-step
    sum of the stored game rewards, exactly like ``reward``. ``window_text_obs`` holds the text
    ids at every step of the window, i-1 .. i-1+nstep, the steps past i-1+k repeating the id at
    i-1+k (so column 0 is ``text_obs`` and column k ``next_text_obs``).
    """

    obs: np.ndarray  # uint8 [B, S, H, W]
    action: np.ndarray  # int64 [B]
    reward: np.ndarray  # float32 [B]
    discount: np.ndarray  # float32 [B]
    next_obs: np.ndarray  # uint8 [B, S, H, W]
    text_obs: np.ndarray  # int64 [B]
    next_text_obs: np.ndarray  # int64 [B]
    goal: np.ndarray  # int64 [B]
    next_goal: np.ndarray  # int64 [B]
    n_steps: np.ndarray  # int64 [B], k: the reward steps summed (nstep, or fewer at the end)
    # uint8 [B, S, H, W], the stack ending at i: obs's one-step successor, for models such as
    # ICM's forward/inverse dynamics. None unless make_replay_loader(one_step_next_obs=True).
    one_step_next_obs: np.ndarray | None = None
    game_reward: np.ndarray | None = None  # float32 [B]; always set by the samplers
    window_text_obs: np.ndarray | None = None  # int64 [B, nstep + 1]; always set by the samplers


def nstep_targets(
    rewards: np.ndarray, discounts: np.ndarray, k: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """n-step reward and bootstrap discount from windows ``rewards``/``discounts`` [B, n] of
    steps i..i+n-1, of which only the first ``k`` [B] are used (rewards already clipped)."""
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
        # padded with nstep zero rows so every window [i-1, i+nstep) is a plain slice
        game = episode["game_reward"].astype(np.float64)
        small = np.zeros((self.length + 1 + nstep, 6), np.float64)
        small[: self.length + 1] = np.stack(
            [
                episode["action"],
                np.clip(reward, -1.0, 1.0) if clip else reward,
                episode["discount"],
                episode["text_obs"],
                episode["goal"],
                np.clip(game, -1.0, 1.0) if clip else game,
            ],
            axis=1,
        )
        self.small = small


def _stack_into(out: np.ndarray, frames: np.ndarray, t: int) -> None:
    """out[:] = frames t-S+1..t, the first frame repeated for indices before 0."""
    lo = t + 1 - len(out)
    if lo >= 0:
        out[:] = frames[lo : t + 1]  # a slice copy: the common case, ~2x faster than take
    else:
        out[:-lo] = frames[0]
        out[-lo:] = frames[: t + 1]


class EpisodeShard:
    """Episodes held in RAM by one sampler, oldest dropped beyond ``capacity`` transitions
    (an episode longer than the capacity on its own is still kept, alone)."""

    def __init__(self, capacity: int, nstep: int, clip_reward: bool,
                 per_episode: bool = False) -> None:
        if capacity < 1 or nstep < 1:
            raise ValueError(f"capacity and nstep must be >= 1, got {capacity}, {nstep}")
        self.capacity, self.nstep, self.clip_reward = capacity, nstep, clip_reward
        # per_episode: the original's draw (an episode uniformly, then a step whose n-step
        # window fits in it); else uniform over the held transitions.
        self.per_episode = per_episode
        self._episodes: list[_Episode] = []
        self.num_transitions = 0
        self._ends = np.zeros(0, np.int64)  # cumulative lengths, rebuilt after each change

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
        """A batch of transitions drawn (with replacement) uniformly from all held ones, or,
        with ``per_episode``, from a uniformly drawn episode at a step 1..T-n+1.

        The frame stacks are written into ``frames_out`` uint8 [2 or 3, B, S, H, W] (obs,
        next_obs, one_step_next_obs) if given, else into one new block: one large allocation
        rather than several keeps the allocator from returning and re-faulting the pages.
        """
        if not self._episodes:
            raise RuntimeError("sampling from an empty episode shard")
        if self.per_episode:
            e = rng.integers(0, len(self._episodes), size=batch_size)
            lengths = np.diff(self._ends, prepend=0)[e]
            i = rng.integers(0, np.maximum(1, lengths - self.nstep + 1)) + 1  # 1..T-n+1
        else:
            u = rng.integers(0, self.num_transitions, size=batch_size)
            e = np.searchsorted(self._ends, u, side="right")
            lengths = np.diff(self._ends, prepend=0)[e]
            i = u - self._ends[e] + lengths + 1  # step in 1..T
        k = np.minimum(self.nstep, lengths - i + 1)
        ends = [i - 1, i - 1 + k] + ([i] if one_step_next_obs else [])  # last frame of a stack
        if frames_out is None:
            h, w = self._episodes[0].frame.shape[1:]
            frames_out = np.empty((len(ends), batch_size, frame_stack, h, w), np.uint8)
        frames = list(frames_out)
        win = np.empty((batch_size, self.nstep + 1, 6), np.float64)  # rows i-1 .. i-1+nstep
        lists = [t.tolist() for t in ends]
        for b, (eb, ib) in enumerate(zip(e.tolist(), i.tolist())):
            ep = self._episodes[eb]
            for out, t in zip(frames, lists):
                _stack_into(out[b], ep.frame, t[b])
            win[b] = ep.small[ib - 1 : ib + self.nstep]
        reward, discount = nstep_targets(win[:, 1:, _REWARD], win[:, 1:, _DISCOUNT], k, gamma)
        game_reward, _ = nstep_targets(win[:, 1:, _GAME], win[:, 1:, _DISCOUNT], k, gamma)
        rows = np.arange(batch_size)
        ids = win.astype(np.int64)
        window = np.minimum(np.arange(self.nstep + 1), k[:, None])  # offsets clamped to k
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
            game_reward=game_reward,
            window_text_obs=ids[rows[:, None], window, _TEXT],
        )
