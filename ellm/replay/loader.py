"""Sampling from the episode files, in-process or in DataLoader workers that shard the episodes.
Each sampler holds one shard, so the replay is in RAM about once whatever the worker count;
workers hand batches over in shared-memory slots, as tensor pickling costs several ms a batch."""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ellm.agent.precision import to_device
from ellm.replay.sampling import Batch, EpisodeShard
from ellm.replay.storage import list_episode_files, load_episode

PREFETCH = 2
# Batch fields sent as rows of one float64 array (ids and counts exact below 2**53).
_SCALARS = ("action", "reward", "discount", "text_obs", "next_text_obs", "goal", "next_goal",
            "n_steps")
_FLOATS = ("reward", "discount")


class ShardSampler:
    """One shard's sampler: keeps its EpisodeShard in step with the files and draws batches."""

    def __init__(self, cfg: ReplayDataset, shard_id: int) -> None:
        self.cfg, self.shard_id = cfg, shard_id
        s = cfg.settings
        capacity = math.ceil(s.capacity / cfg.num_shards)
        self.shard = EpisodeShard(capacity, s.nstep, s.clip_reward, s.per_episode)
        self.rng = np.random.default_rng(np.random.SeedSequence([s.seed, shard_id]))
        self._paths: dict[int, Path] = {}
        self._last_index = -1
        self._dir_mtime: int | None = None
        self._batches_since_listing = 0

    def fetch(self, force: bool = False) -> None:
        """Load this shard's new episode files (listing the dir only if it may have changed)."""
        mtime = os.stat(self.cfg.replay_dir).st_mtime_ns  # read before listing: no lost update
        fresh = self._batches_since_listing < self.cfg.relist_every
        if not force and mtime == self._dir_mtime and fresh:
            return
        self._dir_mtime, self._batches_since_listing = mtime, 0
        n = self.cfg.num_shards
        new = [
            f
            for f in list_episode_files(self.cfg.replay_dir)
            if f.index > self._last_index and f.index % n == self.shard_id
        ]
        if not new:
            return
        self._last_index = new[-1].index
        first, total = len(new), 0
        cap = self.shard.capacity
        while first > 0 and (first == len(new) or total + new[first - 1].length <= cap):
            first -= 1
            total += new[first].length
        for f in new[first:]:
            self._paths[f.index] = f.path
            self._drop(self.shard.add(f.index, load_episode(f.path)))
        if not self.cfg.settings.save_buffer:
            for f in new[:first]:
                f.path.unlink(missing_ok=True)

    def _drop(self, indices: list[int]) -> None:
        for index in indices:
            path = self._paths.pop(index)
            if not self.cfg.settings.save_buffer:
                path.unlink(missing_ok=True)

    def next_batch(self, wait: bool, frames_out: np.ndarray | None = None) -> Batch:
        """Sample a batch; with ``wait``, poll the directory until the shard has an episode."""
        self.fetch()
        while not self.shard.num_transitions:
            if not wait:
                raise RuntimeError(
                    f"no episodes in {self.cfg.replay_dir} for replay shard {self.shard_id}: "
                    "write at least one episode before sampling"
                )
            time.sleep(0.05)
            self.fetch(force=True)
        self._batches_since_listing += 1
        c = self.cfg.settings
        return self.shard.sample(
            self.rng, c.batch_size, c.frame_stack, c.discount, c.one_step_next_obs, frames_out
        )


class _Slots(NamedTuple):
    """A worker's shared batch slots, sent once."""

    worker: int
    frames: torch.Tensor
    scalars: torch.Tensor


class _Ready(NamedTuple):
    worker: int
    slot: int


@dataclass(frozen=True)
class ReplaySettings:
    """How batches are drawn: ``make_replay_loader``'s keywords."""

    capacity: int
    batch_size: int
    nstep: int
    discount: float
    frame_stack: int
    clip_reward: bool
    save_buffer: bool
    seed: int
    one_step_next_obs: bool = False
    per_episode: bool = False


class ReplayDataset(IterableDataset):
    """Endless batches from this process's shard (shard = DataLoader worker id, or 0)."""

    def __init__(self, replay_dir: Path, settings: ReplaySettings, *, num_shards: int,
                 relist_every: int = 100, free_slots: list | None = None) -> None:
        self.replay_dir, self.settings, self.num_shards = Path(replay_dir), settings, num_shards
        self.relist_every, self.free_slots = relist_every, free_slots

    def __iter__(self) -> Iterator[Batch | _Slots | _Ready]:
        info = get_worker_info()
        if (info.num_workers if info else 1) != self.num_shards:
            raise RuntimeError(f"{self.num_shards} shards but {info and info.num_workers} workers")
        if info is None:
            sampler = ShardSampler(self, 0)
            while True:  # waiting would deadlock the caller, who writes the episodes: raise
                yield sampler.next_batch(wait=False)
        else:
            yield from self._serve_slots(ShardSampler(self, info.id), self.free_slots[info.id])

    @staticmethod
    def _serve_slots(sampler: ShardSampler, free: multiprocessing.Queue) -> Iterator:
        first = sampler.next_batch(wait=True)
        frames = np.stack([x for x in (first.obs, first.next_obs, first.one_step_next_obs)
                           if x is not None])
        num_scalars = len(_SCALARS) + first.window_text_obs.shape[1]
        slots = _Slots(
            sampler.shard_id,
            torch.empty((PREFETCH + 1, *frames.shape), dtype=torch.uint8).share_memory_(),
            torch.empty((PREFETCH + 1, num_scalars, len(first.action)), dtype=torch.float64)
            .share_memory_(),
        )
        frames_np, scalars_np = slots.frames.numpy(), slots.scalars.numpy()
        yield slots
        batch = first
        while True:
            k = free.get()
            if batch is None:
                batch = sampler.next_batch(wait=True, frames_out=frames_np[k])
            else:
                frames_np[k] = frames
            for j, name in enumerate(_SCALARS):
                scalars_np[k, j] = getattr(batch, name)
            scalars_np[k, len(_SCALARS):] = batch.window_text_obs.T
            batch = None
            yield _Ready(sampler.shard_id, k)


class _SlotIterator:
    """Main-process end of the workers' shared slots: yields torch Batches it owns."""

    def __init__(self, loader: DataLoader, free_slots: list) -> None:
        self._it = iter(loader)
        self._free = free_slots
        self._slots: dict[int, _Slots] = {}

    def __iter__(self) -> _SlotIterator:
        return self

    @property
    def workers_ready(self) -> int:
        """The workers whose shared slots have arrived (each has loaded its shard)."""
        return len(self._slots)

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the DataLoader's workers."""
        return [w.pid for w in self._it._workers]

    def __next__(self) -> Batch:
        msg = next(self._it)
        while isinstance(msg, _Slots):
            self._slots[msg.worker] = msg
            msg = next(self._it)
        slots = self._slots[msg.worker]
        frames = slots.frames[msg.slot].clone()
        scalars = slots.scalars[msg.slot].clone()
        self._free[msg.worker].put(msg.slot)
        fields = {
            name: scalars[j].float() if name in _FLOATS else scalars[j].long()
            for j, name in enumerate(_SCALARS)
        }
        one_step = frames[2] if len(frames) > 2 else None
        window_text_obs = scalars[len(_SCALARS):].long().T.contiguous()
        return Batch(obs=frames[0], next_obs=frames[1], one_step_next_obs=one_step,
                     window_text_obs=window_text_obs, **fields)


# The text ids stay on the host, beside the string table and the embedding cache's index.
DEVICE_FIELDS = ("obs", "action", "reward", "discount", "next_obs", "one_step_next_obs")


class DeviceBatches:
    """``batches`` for a learner on ``device``: on CUDA the next batch's copy overlaps this update.
    """

    def __init__(self, batches: Iterator[Batch], device: torch.device):
        self.batches, self.device = batches, torch.device(device)
        self._ahead: Batch | None = None

    def __iter__(self) -> DeviceBatches:
        return self

    def __next__(self) -> Batch:
        if self.device.type != "cuda":
            return next(self.batches)
        if self._ahead is None:
            self._ahead = self._copy(next(self.batches))
        batch, self._ahead = self._ahead, self._copy(next(self.batches))
        return batch

    def _copy(self, batch: Batch) -> Batch:
        return batch._replace(**{name: to_device(getattr(batch, name), self.device)
                                 for name in DEVICE_FIELDS if getattr(batch, name) is not None})


def _to_torch(batch: Batch) -> Batch:
    return Batch(*(None if x is None else torch.from_numpy(x) for x in batch))


def make_replay_loader(replay_dir: Path, *, num_workers: int, **settings: Any
                       ) -> Iterator[Batch]:
    """An endless iterator of torch Batches sampled from the episode files in ``replay_dir``
    (``settings``: the fields of :class:`ReplaySettings`)."""
    num_shards = max(1, num_workers)
    free_slots = None
    if num_shards > 1:
        free_slots = [multiprocessing.get_context().Queue() for _ in range(num_workers)]
        for q in free_slots:
            for k in range(PREFETCH + 1):
                q.put(k)
    dataset = ReplayDataset(replay_dir, ReplaySettings(**settings), num_shards=num_shards,
                            free_slots=free_slots)
    if num_shards == 1:
        return map(_to_torch, iter(dataset))
    loader = DataLoader(
        dataset,
        batch_size=None,
        num_workers=num_workers,
        pin_memory=False,
        prefetch_factor=PREFETCH,
        in_order=False,  # a worker still waiting for its first episode must not block the rest
    )
    return _SlotIterator(loader, free_slots)
