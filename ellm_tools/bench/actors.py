"""Frames/s of one process against ``N`` actors, measured in one sitting.

    python -m ellm_tools.bench --actors N[,N...] [--stub-learner] [--frames 1500] [--rounds 1]
        [--actor-overrides key=value ...] [key=value ...]

What it runs, reads and bounds: docs/scale.md, "Measured".
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from ellm.run.config import usable_cpus
from ellm_tools.bench.common import ROOT

RUN = ["env_spec.use_sbert=True", "use_goal=True", "use_language_state=sbert",
       "env_spec.lm_spec.lm_class=SimpleOracle", "device=cpu", "progress=true",
       "progress_every_s=1", "num_eval_episodes=0", "save_snapshot=false", "eval_every_frames=100000000"]
SEED_FRAMES = 400
LEARNER = ("sample", "update")  # time/ sections of the learner
PROGRESS = re.compile(r"frame (\d+)/\d+ \(\d+%\) \| ([\d.]+) frames/s")


@dataclass(frozen=True)
class Measured:
    fps: float  # wall-clock frames/s (the progress lines of the log: resets and all)
    updates_per_frame: float
    learner: float  # seconds per frame sampling and updating (one-process runs)
    frames: int

    @classmethod
    def of(cls, run_dir: Path, after: int) -> Measured:
        """The frames past ``after`` over the wall time they took, and the learner's share."""
        frames = seconds = 0.0
        for prev, (frame, rate) in pairwise(_progress(run_dir / "train.log")):
            if prev[0] >= after:
                frames, seconds = frames + frame - prev[0], seconds + (frame - prev[0]) / rate
        train, times = _rows(run_dir / "train.csv"), _rows(run_dir / "time.csv")
        rows = [(r, t) for r, t in zip(train, times) if float(r["frame"]) > after]
        if not frames or len(rows) < 2:
            raise SystemExit(f"{run_dir}: too few frames past frame {after}; raise --frames")
        learn = sum(float(r["episode_length"]) / float(r["fps"])
                    * sum(float(t.get(k) or 0) for k in LEARNER) for r, t in rows)
        counted = float(rows[-1][0]["frame"]) - float(rows[0][0]["frame"])
        updates = float(rows[-1][0]["updates"]) - float(rows[0][0]["updates"])
        return cls(frames / seconds, updates / counted, learn / sum(
            float(r["episode_length"]) for r, _ in rows), int(frames))


def _progress(log: Path) -> list[tuple[int, float]]:
    return [(int(m[1]), float(m[2])) for m in PROGRESS.finditer(log.read_text())]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _run(out: Path, actors: int, frames: int, stub: bool, overrides: list[str]) -> Measured:
    seed = frames + 2 * SEED_FRAMES + 1 if stub else SEED_FRAMES
    total = frames + 2 * SEED_FRAMES
    cmd = [sys.executable, str(ROOT / "train.py"), *RUN, f"num_actors={actors}",
           f"num_train_frames={total}", f"num_seed_frames={seed}", f"hydra.run.dir={out}",
           *overrides]  # later overrides win (device=cuda, precision=bf16, ...)
    env = {**os.environ, "ELLM_CACHE_DIR": str(out.parent / "lm_cache")}
    proc = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"train.py (num_actors={actors}) failed:\n{proc.stderr[-3000:]}")
    return Measured.of(out, after=2 * SEED_FRAMES)


def _mean(runs: list[Measured]) -> Measured:
    frames = sum(r.frames for r in runs)

    def weighed(name: str) -> float:
        return sum(getattr(r, name) * r.frames for r in runs) / frames

    seconds = sum(r.frames / r.fps for r in runs)
    return Measured(frames / seconds, weighed("updates_per_frame"), weighed("learner"), frames)


def actors_bench(counts: list[int], frames: int, rounds: int, stub: bool,
                 overrides: list[str], faster: list[str] = ()) -> dict[int, Measured]:
    """One process against each ``N`` of ``counts`` actors, ``rounds`` times in turn."""
    runs: dict[int, list[Measured]] = {n: [] for n in [1, *counts]}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for n, measured in runs.items():
                extra = [*overrides, *faster] if n > 1 else overrides
                measured.append(_run(Path(tmp) / f"round{r}_actors{n}", n, frames, stub, extra))
    means = {n: _mean(m) for n, m in runs.items()}
    one = means[1]
    kind = "stub learner (no updates: the main process only stores)" if stub else "updates on"
    print(f"{kind}; {usable_cpus()} usable cores; {rounds} round(s); one process: "
          f"{' '.join(overrides) or 'defaults'}; actors also: {' '.join(faster) or '-'}")
    print("| setting | frames/s | vs one process | updates/frame | 5M frames take | bound |")
    print("| --- | --- | --- | --- | --- | --- |")
    per_frame = 1 / one.fps
    env_side = per_frame - one.learner  # the actors' part, and the storage the learner keeps
    for n, m in means.items():
        name = "1 process" if n == 1 else f"{n} actors"
        bound = "" if n == 1 else "{:.1f} ({})".format(*_bound(n, one, env_side))
        print(f"| {name} | {m.fps:.1f} | {m.fps / one.fps:.2f}x | {m.updates_per_frame:.4f} | "
              f"{5e6 / m.fps / 3600:.1f} h | {bound} |")
    print(f"one process's costs per frame: learner (sample + update) {1e3 * one.learner:.2f} ms, "
          f"the rest (env side, storage) {1e3 * env_side:.2f} ms")
    return means


def _bound(n: int, one: Measured, env_side: float) -> tuple[float, str]:
    """Frames/s ``n`` actors could reach by the one-process run's costs, and what sets it."""
    bounds = {"learner": 1 / one.learner if one.learner else float("inf"),
              "actors": n / env_side, "cores": usable_cpus() * one.fps}
    name, bound = min(bounds.items(), key=lambda item: item[1])
    return bound, name


__all__ = ["Measured", "actors_bench"]
