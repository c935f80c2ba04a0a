"""Replay memory at scale (``python -m ellm_tools.bench.replay --memory``), and frames compressed
one by one in memory, measured against the current arrays: each size in a fresh process, so its
memory is its own; frames dominate, so two sizes fix the line."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import torch

from ellm.replay.loader import make_replay_loader
from ellm.replay.sampling import EpisodeShard, stack_into
from ellm.replay.storage import list_episode_files, load_episode
from ellm_tools.bench.common import private_mib
from ellm_tools.bench.replay_data import (
    BATCH,
    GAMMA,
    NSTEP,
    STACK,
    tile_episodes,
    write_crafter_episodes,
)

PAPER_CAPACITY = 5_000_000


def linear_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    x, y = np.array(points, np.float64).T
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def _measure(replay_dir: Path, size: int, workers: int, batches: int, out) -> None:
    """In a fresh process: load ``size`` transitions as a learner does and report."""
    torch.set_num_threads(1)
    base = private_mib(os.getpid())
    start = time.perf_counter()
    it = make_replay_loader(replay_dir, capacity=size, batch_size=BATCH, num_workers=workers,
                            nstep=NSTEP, discount=GAMMA, frame_stack=STACK, clip_reward=True,
                            save_buffer=True, seed=0)
    next(it)
    while workers > 1 and it.workers_ready < workers:  # every worker has loaded its shard
        next(it)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    rate = batches / (time.perf_counter() - start)
    pids = it.worker_pids if workers > 1 else []
    out.put({"size": size, "workers": workers, "base": base, "private": private_mib(os.getpid()),
             "rss": _rss_mib(os.getpid()), "workers_private": sum(map(private_mib, pids)),
             "load_s": load_s, "batches_per_s": rate})


def measure(replay_dir: Path, size: int, workers: int, batches: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_measure, args=(replay_dir, size, workers, batches, out))
    proc.start()
    result = out.get()
    proc.join()
    return result


def memory_bench(sizes: list[int], workers: list[int], episodes: int, length: int,
                 batches: int) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        d = Path(tmp)
        write_crafter_episodes(d, episodes, length)
        held = tile_episodes(d, max(sizes))
        print(f"{episodes} real Crafter episodes of {length} steps tiled to {held} transitions "
              f"({sum(f.path.stat().st_size for f in list_episode_files(d)[:episodes]) / (episodes * length):.0f} B/transition on disk)")
        print("size | workers | process private MiB (before loading) | workers' private MiB | "
              "load s | batches/s")
        rows = []
        for w in workers:
            for size in sizes:
                r = measure(d, size, w, batches)
                rows.append(r)
                print(f"{size} | {w} | {r['private']:.0f} ({r['base']:.0f}) | "
                      f"{r['workers_private']:.0f} | {r['load_s']:.1f} | {r['batches_per_s']:.0f}")
            if len(sizes) >= 2:
                pts = [(r["size"], r["private"] + r["workers_private"]) for r in rows
                       if r["workers"] == w]
                a, b = linear_fit(pts)
                print(f"  workers={w}: linear fit over the {len(pts)} measured sizes: {a:.0f} MiB"
                      f" + {b * 2**20:.0f} B/transition; {PAPER_CAPACITY:,} transitions "
                      f"(extrapolated, not measured): {(a + b * PAPER_CAPACITY) / 1024:.1f} GiB")
        compressed_vs_arrays(d, episodes, batches)


class ZlibFrames:
    """One episode's frames as zlib-compressed bytes, one per frame (a candidate store)."""

    def __init__(self, frames: np.ndarray, level: int = 1) -> None:
        self.shape, self.blobs = frames.shape[1:], [zlib.compress(f.tobytes(), level)
                                                    for f in frames]

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.blobs)

    def window(self, lo: int, hi: int) -> np.ndarray:
        return np.stack([np.frombuffer(zlib.decompress(self.blobs[t]), np.uint8)
                         .reshape(self.shape) for t in range(lo, hi + 1)])


def compressed_vs_arrays(d: Path, episodes: int, batches: int) -> None:
    """Frame stacks of the same draws from the arrays and from zlib frames, interleaved."""
    arrays = [load_episode(f.path)["frame"] for f in list_episode_files(d)[:episodes]]
    zipped = [ZlibFrames(a) for a in arrays]
    shard = EpisodeShard(10**9, NSTEP, True)
    for i, a in enumerate(arrays):
        shard.add(i, {"frame": a, **{k: np.zeros(len(a), np.float32) for k in (
            "action", "reward", "discount", "text_obs", "goal")}})
    rng = np.random.default_rng(0)
    out = np.empty((2, BATCH, STACK, *arrays[0].shape[1:]), np.uint8)
    times = {"arrays": 0.0, "zlib": 0.0}
    for _ in range(batches):
        u = rng.integers(0, shard.num_transitions, BATCH)
        e = np.searchsorted(shard.ends, u, side="right")
        lengths = np.diff(shard.ends, prepend=0)[e]
        i = u - shard.ends[e] + lengths + 1
        k = np.minimum(NSTEP, lengths - i + 1)
        t = time.perf_counter()
        for b in range(BATCH):
            stack_into(out[0, b], arrays[e[b]], i[b] - 1)
            stack_into(out[1, b], arrays[e[b]], i[b] - 1 + k[b])
        times["arrays"] += time.perf_counter() - t
        want = out.copy()
        t = time.perf_counter()
        for b in range(BATCH):
            lo, hi = max(i[b] - STACK, 0), i[b] - 1 + k[b]
            frames = zipped[e[b]].window(lo, hi)
            stack_into(out[0, b], frames, i[b] - 1 - lo)
            stack_into(out[1, b], frames, hi - lo)
        times["zlib"] += time.perf_counter() - t
        if not np.array_equal(out, want):
            raise AssertionError("zlib frames built other stacks than the arrays")
    n = sum(len(a) for a in arrays)
    print(f"frames in RAM: arrays {sum(a.nbytes for a in arrays) / n:.0f} B/frame, zlib level 1 "
          f"per frame {sum(z.nbytes for z in zipped) / n:.0f} B/frame")
    print(f"frame stacks of a batch of {BATCH} (obs + next_obs), {batches} batches interleaved: "
          f"arrays {1e3 * times['arrays'] / batches:.2f} ms, zlib {1e3 * times['zlib'] / batches:.2f}"
          f" ms ({times['zlib'] / times['arrays']:.1f}x); same stacks")
