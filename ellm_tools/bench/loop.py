"""The loop's own speed (``python -m ellm_tools.bench``, its default mode and
``--side-by-side``): env, update and full-loop costs in one workspace; default-settings runs alone
and two at a time."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ellm_tools.bench.common import BASE, ROOT, run_fps, workspace


def loop_costs(frames: int, updates: int, overrides: list[str]) -> None:
    """Env cost, update cost and the full loop's frames/s against their bound, in one workspace."""
    with tempfile.TemporaryDirectory() as tmp:
        # 1. no updates: seed frames cover the whole phase
        ws = workspace(overrides + [f"num_train_frames={frames}",
                                    f"num_seed_frames={frames + 1}"], Path(tmp) / "a")
        ws.train()  # warm-up: JIT, SBERT and caption caches
        start = time.perf_counter()
        _train_more(ws, 2 * frames)
        env_before = (time.perf_counter() - start) / frames
        stored = ws.storage.num_transitions
        disk = sum(p.stat().st_size for p in (Path(tmp) / "a" / "buffer").glob("*.npz"))
        ram = ram_bytes_per_transition(Path(tmp) / "a" / "buffer", ws.run.nstep)

        # 2. updates alone, batches from the loader over the data just collected
        batches = iter(ws.loader)
        ws.agent.update(next(batches), 0)
        start = time.perf_counter()
        for i in range(updates):
            ws.agent.update(next(batches), i)
        update_cost = (time.perf_counter() - start) / updates

        # 3. the full loop, updates on
        every = ws.spec.agent.update_every_steps
        ws.run = dataclasses.replace(ws.run, num_seed_frames=0)
        _train_more(ws, 3 * frames)  # the first batches pay worker start-up
        start = time.perf_counter()
        _train_more(ws, 4 * frames)
        loop_fps = frames / (time.perf_counter() - start)

        # 4. no updates again: the env cost falls as caption and SBERT caches warm up, so the
        # loop is compared with the mean of the costs measured before and after it
        ws.run = dataclasses.replace(ws.run, num_seed_frames=10**12)
        start = time.perf_counter()
        _train_more(ws, 5 * frames)
        env_after = (time.perf_counter() - start) / frames
    env_cost = (env_before + env_after) / 2
    bound = 1.0 / (env_cost + update_cost / every)
    print(f"env step (loop without updates): {1e3 * env_cost:7.2f} ms/frame "
          f"({1 / env_cost:6.1f} frames/s; {1e3 * env_before:.2f} before the loop, "
          f"{1e3 * env_after:.2f} after)")
    print(f"update (sample + DQN update)   : {1e3 * update_cost:7.2f} ms/update")
    print(f"bound, one update per {every} frames: {bound:6.1f} frames/s")
    print(f"full loop                      : {loop_fps:6.1f} frames/s = {loop_fps / bound:.2f} "
          f"of the bound (target >= 0.8)")
    print(f"stored transitions: {stored}; on disk {disk / stored:.0f} B/transition (compressed); "
          f"in a sampler's RAM {ram:.0f} B/transition")


def ram_bytes_per_transition(replay_dir: Path, nstep: int) -> float:
    from ellm.replay.sampling import EpisodeShard
    from ellm.replay.storage import list_episode_files, load_episode

    shard = EpisodeShard(capacity=2**62, nstep=nstep, clip_reward=True)
    for f in list_episode_files(replay_dir):
        shard.add(f.index, load_episode(f.path))
    return shard.nbytes / max(shard.num_transitions, 1)


def _train_more(ws, frames: int) -> None:
    """Continue ``ws`` up to ``frames`` total frames, dropping the episode left open."""
    from ellm.replay import ReplayStorage

    ws.storage = ReplayStorage(ws.storage.replay_dir, ws.strings)
    ws.run = dataclasses.replace(ws.run, num_train_frames=frames)
    ws.train()


SIDE_BY_SIDE = [
    *BASE[:4], "env_spec.length=100", "num_seed_frames=200", "num_eval_episodes=0",
    "save_snapshot=false", "eval_every_frames=100000000", "progress=false",
]


def side_by_side(frames: int, overrides: list[str]) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}  # the defaults are under test
    with tempfile.TemporaryDirectory() as tmp:

        def launch(name: str) -> tuple[subprocess.Popen, Path]:
            out = Path(tmp) / name
            cmd = [sys.executable, str(ROOT / "train.py"), *SIDE_BY_SIDE,
                   f"num_train_frames={frames}", f"hydra.run.dir={out}", *overrides]
            return subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True), out

        def finish(jobs: list[tuple[subprocess.Popen, Path]]) -> list[float]:
            for proc, _ in jobs:
                _, err = proc.communicate()
                if proc.returncode != 0:
                    raise SystemExit(f"train.py failed:\n{err[-2000:]}")
            return [run_fps(out) for _, out in jobs]

        (alone,) = finish([launch("alone")])
        pair = finish([launch("a"), launch("b")])
    print(f"one run alone             : {alone:6.1f} frames/s")
    for name, fps in zip("ab", pair):
        print(f"run {name} beside the other  : {fps:6.1f} frames/s = {fps / alone:.2f}x of one "
              "run alone (target >= 0.4)")
