"""Replay benchmark on real Crafter frames: bytes per transition, sampling speed, worker RAM.

    python -m ellm_tools.bench.replay [--episodes 20] [--length 400] [--batches 300]
    python -m ellm_tools.bench.replay --memory 250000,1000000 [--workers 0,2] [--episodes 4]

What ``--memory`` measures: :mod:`ellm_tools.bench.replay_memory` and docs/scale.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ellm.replay.loader import ReplayDataset, ReplaySettings, ShardSampler, make_replay_loader
from ellm.replay.sampling import EpisodeShard
from ellm.replay.storage import list_episode_files, load_episode
from ellm_tools.bench.common import private_mib
from ellm_tools.bench.replay_data import BATCH, GAMMA, NSTEP, STACK, write_crafter_episodes
from ellm_tools.bench.replay_memory import memory_bench


class _TensorBatches(IterableDataset):
    """The plain design: workers' numpy batches go through the DataLoader's tensor sharing."""

    def __init__(self, dataset: ReplayDataset) -> None:
        self.dataset = dataset

    def __iter__(self):
        sampler = ShardSampler(self.dataset, get_worker_info().id)
        while True:
            yield sampler.next_batch(wait=True)


class _PerSample(IterableDataset):
    """The alternative design: single transitions, collated by the DataLoader."""

    def __init__(self, replay_dir: Path) -> None:
        self.replay_dir = replay_dir

    def __iter__(self):
        shard = EpisodeShard(10**9, NSTEP, True)
        for f in list_episode_files(self.replay_dir):
            shard.add(f.index, load_episode(f.path))
        rng = np.random.default_rng(0)
        while True:
            yield tuple(x[0] for x in shard.sample(rng, 1, STACK, GAMMA)[:10])


def rate(it, batches: int, work_s: float = 0.0) -> tuple[float, float]:
    """(batches/s, median ms waited for a batch) while busy ``work_s`` per batch, as an update."""
    next(it)
    waits, start = [], time.perf_counter()
    for _ in range(batches):
        t = time.perf_counter()
        next(it)
        waits.append(time.perf_counter() - t)
        while time.perf_counter() - t < work_s:
            pass
    return batches / (time.perf_counter() - start), 1000 * float(np.median(waits))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.bench.replay",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--length", type=int, default=400)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--memory", default="",
                        help="replay sizes in transitions, e.g. 250000,1000000: memory per size")
    parser.add_argument("--workers", default="0",
                        help="with --memory: replay_buffer_num_workers values, e.g. 0,2")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.memory:
        memory_bench([int(n) for n in args.memory.split(",")],
                     [int(n) for n in args.workers.split(",")], args.episodes, args.length,
                     args.batches)
        return
    with tempfile.TemporaryDirectory() as tmp:
        shard = storage_costs(Path(tmp), args.episodes, args.length)
        sampling_costs(Path(tmp), shard, args.batches)
        print(f"pid {os.getpid()} done")


def storage_costs(d: Path, episodes: int, length: int) -> EpisodeShard:
    n, write_s = write_crafter_episodes(d, episodes, length)
    disk = sum(f.path.stat().st_size for f in list_episode_files(d))
    shard = EpisodeShard(10**9, NSTEP, True)
    t = time.perf_counter()
    for f in list_episode_files(d):
        shard.add(f.index, load_episode(f.path))
    load_s = time.perf_counter() - t
    print(f"{n} transitions in {episodes} episodes of {length} steps")
    print(f"disk: {disk / n:.0f} B/transition; RAM (arrays): {shard.nbytes / n:.0f} B/transition")
    print(f"write (collect + compress + fsync): {1000 * write_s / episodes:.1f} ms/episode;"
          f" load: {1000 * load_s / episodes:.1f} ms/episode")
    return shard


def sampling_costs(d: Path, shard: EpisodeShard, batches: int) -> None:
    """Batches/s of the shard alone and of each loader variant over the replay in ``d``."""
    rng = np.random.default_rng(0)
    frames_out = np.empty((2, BATCH, STACK, 84, 84), np.uint8)
    t = time.perf_counter()
    for _ in range(batches):
        shard.sample(rng, BATCH, STACK, GAMMA)
    print(f"EpisodeShard.sample, batch {BATCH}: "
          f"{1000 * (time.perf_counter() - t) / batches:.2f} ms")
    t = time.perf_counter()
    for _ in range(batches):
        shard.sample(rng, BATCH, STACK, GAMMA, frames_out=frames_out)
    print(f"EpisodeShard.sample into a reused buffer (as workers do): "
          f"{1000 * (time.perf_counter() - t) / batches:.2f} ms")
    kw = {"capacity": 10**9, "batch_size": BATCH, "nstep": NSTEP, "discount": GAMMA,
          "frame_stack": STACK, "clip_reward": True, "save_buffer": True, "seed": 0}
    plain = ReplayDataset(d, ReplaySettings(**kw), num_shards=2)
    variants = {
        "make_replay_loader(num_workers=0)": lambda: make_replay_loader(d, num_workers=0, **kw),
        "make_replay_loader(num_workers=2)": lambda: make_replay_loader(d, num_workers=2, **kw),
        "alternative: 2 workers, batches as DataLoader tensors": lambda: iter(DataLoader(
            _TensorBatches(plain), batch_size=None, num_workers=2, in_order=False)),
        "alternative: per-sample + default collate, in-process": lambda: iter(DataLoader(
            _PerSample(d), batch_size=BATCH, num_workers=0)),
    }
    print(f"{'':54} batches/s | median wait per batch with a 35 ms CPU-bound update")
    for name, make in variants.items():
        it = make()
        bps, _ = rate(it, batches // 3)
        _, waited = rate(it, 60, work_s=0.035)
        print(f"{name:54} {bps:9.0f} | {waited:.2f} ms")
        if name.endswith("num_workers=2)"):
            mib = [private_mib(pid) for pid in it.worker_pids]
            print(f"  worker private RSS: {', '.join(f'{m:.0f}' for m in mib)} MiB"
                  f" (whole buffer: {shard.nbytes / 2**20:.0f} MiB of arrays)")
        del it


if __name__ == "__main__":
    main()
