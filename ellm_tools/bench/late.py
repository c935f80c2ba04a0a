"""The late phase of a paper run, measured, and the 5M-frame time projected from the phases.

    python -m ellm_tools.bench --late [--prefill 250000] [--frames 1500] [--rounds 1] [key=value ...]

The first frames of a run say little of the rest (epsilon about 1, a small replay, no
evaluation); what each round times is in docs/scale.md, "The late phase and memory at paper
scale".
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ellm_tools.bench.common import compose, private_mib
from ellm_tools.bench.replay_data import tile_episodes


@dataclass(frozen=True)
class Schedule:
    total: int = 5_000_000  # num_train_frames
    decay: int = 1_000_000  # agent.train_eps_decay_steps: epsilon falls linearly from 1
    eval_every: int = 25_000  # eval_every_frames: one evaluation and one snapshot each
    eval_episodes: int = 10  # num_eval_episodes
    length: int = 400  # env_spec.length: an evaluation episode's steps at most

    @property
    def evaluations(self) -> int:
        return self.total // self.eval_every + 1 + (self.total % self.eval_every != 0)


PAPER = Schedule()


def project(s: Schedule, early: float, late: float, eval_step: float,
            snapshot: float) -> dict[str, float]:
    """Seconds of each part of a run on ``s``. Epsilon's decay is linear, so it costs the mean of
    the early and late rates; evaluation episodes at full length make an upper bound."""
    decay = min(s.decay, s.total)
    parts = {
        "decay phase": decay * (early + late) / 2,
        "late phase": (s.total - decay) * late,
        "evaluations": s.evaluations * s.eval_episodes * s.length * eval_step,
        "snapshots": s.evaluations * snapshot,
    }
    return {**parts, "total": sum(parts.values())}


def eval_episodes_for(frames: int, s: Schedule = PAPER) -> int:
    return max(1, round(frames * s.eval_episodes / s.eval_every))


class _Timed:

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.calls, self.seconds, self.last = fn, 0, 0.0, None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            self.last = self.fn(*args, **kwargs)
            return self.last
        finally:
            self.calls, self.seconds = self.calls + 1, self.seconds + time.perf_counter() - start


@dataclass(frozen=True)
class Window:
    frames: int  # timed: with actors, those after their warm-up
    seconds: float  # evaluation and snapshot included
    train_episodes: int
    eval_episodes: int
    eval_seconds: float
    eval_frames: float
    snapshots: int
    snapshot_seconds: float
    warmup_frames: int  # with actors: taken before the clock started, not in ``frames``
    span: tuple[int, int]

    @property
    def train_seconds_per_frame(self) -> float:
        return (self.seconds - self.eval_seconds - self.snapshot_seconds) / self.frames


@dataclass(frozen=True)
class LateResult:
    replay_transitions: int
    rounds: list[tuple[Window, Window]]  # (early, late) per round
    memory: dict[str, float]  # MiB, at the end of the last late window
    actors: int = 1


LATE_RUN = ["env_spec.use_sbert=True", "use_goal=True", "use_language_state=sbert",
            "env_spec.lm_spec.lm_class=SimpleOracle", "device=cpu", "progress=false",
            "save_snapshot=true", "save_buffer=true", "eval_every_frames=100000000",
            f"replay_buffer_size={PAPER.total}"]


def warmup_frames(num_actors: int) -> int:
    """Steps a window with actors leaves untimed once each actor has sent its first: twice the
    ``2 * CHUNK_STEPS`` each runs ahead takes what they made while the others started."""
    from ellm.actors.messages import CHUNK_STEPS

    return 0 if num_actors <= 1 else 4 * CHUNK_STEPS * num_actors


class _LoopClock:
    """Times the loop of each ``ws.train()`` past its warm-up (``skip`` steps after every actor
    sent one); each of the first ``most`` warm-up steps moves the loop's end on, so a slow start
    costs no timed steps and an actor that never sends one cannot hold the loop."""

    def __init__(self, ws: Any, skip: int, sources: int, most: int) -> None:
        self.skip, self.sources, self.most, self._ws = skip, sources, most, ws
        self.start: float | None = None
        self.end, self.timed, self.untimed, self.memory = 0.0, 0, 0, {}
        self.plain = ws.collector
        ws.collector = self._timed

    @contextlib.contextmanager
    def _timed(self) -> Iterator[Any]:
        with self.plain() as collector:
            warm = self.sources <= 1 and self.skip == 0
            self.start = time.perf_counter() if warm else None
            self.timed = self.untimed = 0
            seen: set[int] = set()
            after = 0  # steps taken since each source had sent one
            plain_next = collector.next

            def next_step(timer: Any) -> Any:
                nonlocal after
                if self.start is None and len(seen) == self.sources and after == self.skip:
                    self.start = time.perf_counter()  # before the first timed step is taken
                got = plain_next(timer)
                if self.start is not None:
                    self.timed += 1
                else:
                    seen.add(got.source)
                    after += len(seen) == self.sources
                    self.untimed += 1
                    if self.untimed <= self.most:
                        run = self._ws.run
                        self._ws.run = dataclasses.replace(
                            run, num_train_frames=run.num_train_frames + 1)
                return got

            collector.next = next_step
            yield collector
            self.end = time.perf_counter()
            self.memory = memory_mib()

    def seconds(self) -> float:
        if self.start is None or not self.timed:
            raise RuntimeError(f"the window ended within its warm-up: no step was timed in "
                               f"{self.untimed} steps ({self.skip} after every actor's first)")
        return self.end - self.start


def held_epsilon(options: Any, late: bool) -> Any:
    value = options.train_eps_min if late else options.train_eps_max
    return dataclasses.replace(options, train_eps_max=value, train_eps_min=value)


def late_phase(frames: int, rounds: int, prefill: int, overrides: list[str],
               collect: int = 1200, run_dir: Path | None = None,
               warmup: int | None = None) -> LateResult:
    """Pre-fill, then ``rounds`` of (early window, late window)."""
    from ellm.loop.workspace import Workspace
    from ellm.replay import ReplayStorage
    from ellm.run.config import validate

    n = eval_episodes_for(frames)
    # random actions for ``collect`` frames (the seed frames): real frames and captions
    cfg = compose([*LATE_RUN, f"num_eval_episodes={n}", f"num_train_frames={collect}",
                    f"num_seed_frames={collect + 1}", *overrides])
    actors = cfg.num_actors if isinstance(cfg.num_actors, int) else 1  # else Workspace says
    skip = (warmup_frames(actors) if warmup is None else warmup) if actors > 1 else 0
    if frames < 1 or skip < 0:
        raise ValueError(f"a window needs frames >= 1 and a warm-up >= 0, not {frames} and {skip}")
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(validate(cfg), run_dir or Path(tmp) / "run")
        ws.train()
        tile_episodes(ws.storage.replay_dir, prefill)
        held = ReplayStorage(ws.storage.replay_dir, ws.strings).num_transitions
        ws.run = dataclasses.replace(ws.run, num_seed_frames=0)
        ws.evaluator.run = _Timed(ws.evaluator.run)
        ws.save_snapshot = _Timed(ws.save_snapshot)
        # A warm-up lengthens its window by at most ten windows' worth of steps.
        clock = _LoopClock(ws, skip, ws.num_actors, most=10 * (frames + skip))
        options, learner_options = ws.spec.agent, ws.agent.options

        def window(late: bool) -> Window:
            # Actors build their agents from the options they are given at start.
            ws.agent.options = held_epsilon(learner_options, late)
            ws.spec = dataclasses.replace(ws.spec, agent=held_epsilon(options, late))
            ws.evaluator.num_episodes = n if late else 0
            ws.storage = ReplayStorage(ws.storage.replay_dir, ws.strings)  # drop the open episode
            ws.run = dataclasses.replace(ws.run, save_snapshot=late,
                                         num_train_frames=ws.counters.frame + frames)
            evals, snaps = ws.evaluator.run, ws.save_snapshot
            e0, s0, ec, sc = evals.seconds, snaps.seconds, evals.calls, snaps.calls
            episodes, first = ws.counters.episode, ws.counters.frame
            ws.train()
            if evals.calls == ec:
                raise RuntimeError("the window ended without the run's evaluation call")
            k = n if late else 0
            length = (evals.last or {}).get("eval/episode_length", 0.0)
            return Window(clock.timed, clock.seconds(), ws.counters.episode - episodes,
                          k, evals.seconds - e0, length * k, snaps.calls - sc, snaps.seconds - s0,
                          clock.untimed, (first, ws.counters.frame))

        window(late=True)  # untimed: loads the pre-filled replay, first updates and snapshot
        results = [(window(late=False), window(late=True)) for _ in range(rounds)]
    return LateResult(held, results, clock.memory, ws.num_actors)


def memory_mib() -> dict[str, float]:
    """This process's and its replay workers' memory, in MiB, from /proc."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text()
                  .splitlines() if ":" in line)
    kib = {k: float(status[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}
    children = []
    for task in Path("/proc/self/task").iterdir():
        children += [int(p) for p in (task / "children").read_text().split()]
    return {"rss": kib["VmRSS"], "peak_rss": kib["VmHWM"], "private": private_mib(os.getpid()),
            "children_private": sum(private_mib(pid) for pid in children),
            "children": float(len(children))}


def _spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"[{fmt.format(min(values))}-{fmt.format(max(values))}]")


def report(result: LateResult, frames: int) -> None:
    early = [e.train_seconds_per_frame for e, _ in result.rounds]
    late = [w.train_seconds_per_frame for _, w in result.rounds]
    whole = [w.frames / w.seconds for _, w in result.rounds]
    per_episode = [w.eval_seconds / w.eval_episodes for _, w in result.rounds]
    snapshot = [w.snapshot_seconds / max(w.snapshots, 1) for _, w in result.rounds]
    r = len(result.rounds)
    n = result.rounds[0][1].eval_episodes
    untimed = [w.warmup_frames for pair in result.rounds for w in pair]
    who = ("one process" if result.actors <= 1 else
           f"{result.actors} actors, started anew per window, timed after their start-up and a "
           f"warm-up of {_spread(untimed, '{:.0f}')} frames")
    print(f"measured: {r} round(s) of {frames} frames per window ({who}), replay pre-filled to "
          f"{result.replay_transitions} transitions; median [min-max] over rounds")
    print(f"  early phase (epsilon 1), training  : {_spread([1 / x for x in early])} frames/s")
    print(f"  late phase (epsilon floor), training: {_spread([1 / x for x in late])} frames/s")
    print(f"  late / early, per round            : "
          f"{_spread([e / x for e, x in zip(early, late)], '{:.2f}')}x")
    print(f"  late window with {n} evaluation episode(s) and a snapshot: {_spread(whole)} "
          f"frames/s (the paper's share: 10 episodes per 25,000 frames)")
    steps = [w.eval_frames / w.eval_episodes for _, w in result.rounds]
    per_step = [w.eval_seconds / max(w.eval_frames, 1) for _, w in result.rounds]
    ended = [e.train_episodes + w.train_episodes for e, w in result.rounds]
    print(f"  evaluation: {_spread(per_episode, '{:.2f}')} s per episode of "
          f"{_spread(steps, '{:.0f}')} steps ({_spread([1e3 * x for x in per_step])} ms per step); "
          f"snapshot: {_spread(snapshot, '{:.2f}')} s")
    print(f"  training episodes ended per round (both windows): {_spread(ended, '{:.0f}')}")
    m = result.memory
    print(f"  memory at the end of the last window: RSS {m['rss']:.0f} MiB (peak {m['peak_rss']:.0f}), "
          f"private {m['private']:.0f} MiB; {m['children']:.0f} child process(es), "
          f"{m['children_private']:.0f} MiB private")
    parts = project(PAPER, statistics.median(early), statistics.median(late),
                    statistics.median(per_step), statistics.median(snapshot))
    print(f"projected (not measured): a {PAPER.total:,}-frame run on this machine, "
          f"from the medians above")
    print(f"  decay phase, 0-{PAPER.decay:,} frames (mean of the epsilon-1 and floor rates): "
          f"{parts['decay phase'] / 3600:.1f} h")
    print(f"  late phase, {PAPER.decay:,}-{PAPER.total:,} frames (floor rate): "
          f"{parts['late phase'] / 3600:.1f} h")
    print(f"  {PAPER.evaluations} evaluations x {PAPER.eval_episodes} episodes of "
          f"{PAPER.length} steps (an upper bound; measured ms per step): "
          f"{parts['evaluations'] / 3600:.1f} h; {PAPER.evaluations} snapshots: "
          f"{parts['snapshots'] / 3600:.2f} h")
    print(f"  total: {parts['total'] / 3600:.1f} h (seed frames, start-up and the replay's growth "
          f"from empty not modelled)")
