"""The late-phase bench: the projection's arithmetic, the tiling, and a tiny run of the mode."""

import contextlib
import dataclasses
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import csv_rows

from ellm.replay.storage import list_episode_files, load_episode, save_episode
from ellm_tools.bench.late import (
    PAPER,
    Schedule,
    _LoopClock,
    eval_episodes_for,
    late_phase,
    project,
)
from ellm_tools.bench.replay_data import tile_episodes


def test_projection_weights_each_phase_by_its_frames():
    s = Schedule(total=5_000_000, decay=1_000_000, eval_every=25_000, eval_episodes=10,
                 length=400)
    parts = project(s, early=0.010, late=0.020, eval_step=0.005, snapshot=0.5)
    assert s.evaluations == 201  # frame 0, then every 25k frames up to 5M
    assert parts["decay phase"] == pytest.approx(1e6 * 0.015)
    assert parts["late phase"] == pytest.approx(4e6 * 0.020)
    assert parts["evaluations"] == pytest.approx(201 * 10 * 400 * 0.005)  # full length
    assert parts["snapshots"] == pytest.approx(201 * 0.5)
    assert parts["total"] == pytest.approx(15_000 + 80_000 + 4020 + 100.5)
    assert Schedule(total=30_000, eval_every=25_000).evaluations == 3  # 0, 25k and the end
    short = project(Schedule(total=500, decay=1_000), 1.0, 3.0, 0.0, 0.0)
    assert short["decay phase"] == 1000 and short["late phase"] == 0  # decay never ends


def test_eval_episodes_keep_the_schedule_share():
    assert eval_episodes_for(2_500) == 1 and eval_episodes_for(25_000) == PAPER.eval_episodes
    assert eval_episodes_for(50) == 1  # at least one


def test_tiling_links_whole_episodes_under_new_indices(tmp_path: Path):
    for i, length in enumerate((3, 5)):
        save_episode(tmp_path / f"{i:06d}_{length}.npz", {
            "frame": np.full((length + 1, 4, 4), i, np.uint8),
            **{k: np.zeros(length + 1, t) for k, t in (
                ("action", np.int32), ("reward", np.float32), ("discount", np.float32),
                ("text_obs", np.int32), ("goal", np.int32))}})
    assert tile_episodes(tmp_path, 18) == 19  # 3 + 5, then 3, 5, 3: whole episodes
    files = list_episode_files(tmp_path)
    assert [(f.index, f.length) for f in files] == [(0, 3), (1, 5), (2, 3), (3, 5), (4, 3)]
    assert (load_episode(files[3].path)["frame"] == 1).all()


@pytest.mark.e2e
def test_late_phase_times_evaluations_on_a_prefilled_replay():
    tiny = ["env_spec.length=40", "batch_size=8", "replay_buffer_num_workers=0",
            "agent.critic_target_update_every_steps=40"]
    result = late_phase(frames=60, rounds=1, prefill=1500, overrides=tiny, collect=120)
    assert 1500 <= result.replay_transitions < 1500 + 40
    ((early, late),) = result.rounds
    assert early.eval_episodes == 0 and early.snapshots == 0
    assert late.eval_episodes == 1 and late.snapshots == 1  # inside the timed window
    assert 0 < late.eval_seconds + late.snapshot_seconds < late.seconds
    assert late.eval_frames > 0 and late.train_seconds_per_frame > 0
    assert early.train_episodes + late.train_episodes >= 1
    assert result.memory["private"] > 0


def test_memory_fit_and_zlib_frames():
    from ellm_tools.bench.replay_memory import ZlibFrames, linear_fit

    assert linear_fit([(250_000, 2000.0), (1_000_000, 7000.0)]) == pytest.approx(
        (2000.0 - 250_000 * 5000 / 750_000, 5000 / 750_000))
    frames = np.random.default_rng(0).integers(0, 255, (6, 5, 7), dtype=np.uint8)
    z = ZlibFrames(frames)
    assert np.array_equal(z.window(2, 4), frames[2:5]) and z.nbytes > 0


@pytest.mark.e2e
def test_late_phase_with_actors_holds_their_epsilon_and_times_after_their_start(tmp_path: Path):
    tiny = ["env_spec.length=40", "batch_size=8", "replay_buffer_num_workers=0",
            "agent.critic_target_update_every_steps=40", "num_actors=2"]
    result = late_phase(frames=240, rounds=1, prefill=600, overrides=tiny, collect=120,
                        run_dir=tmp_path / "run", warmup=80)
    ((early, late),) = result.rounds
    # Each window times its 240 frames after the actors' start-up and 80 more, however long
    # that start-up took; its warm-up frames are counted apart.
    assert result.actors == 2 and early.frames == late.frames == 240
    for w in (early, late):
        assert w.warmup_frames > 80 and w.span[1] - w.span[0] == w.frames + w.warmup_frames
    assert early.span[1] == late.span[0]
    assert late.eval_episodes == 1 and late.snapshots == 1 and early.snapshots == 0
    assert 0 < late.eval_seconds + late.snapshot_seconds < late.seconds
    assert result.memory["children"] >= 2  # read while the actors were alive
    # The actors act at the window's epsilon: uniformly over 139 actions in the early window
    # (epsilon 1), greedily in the late one (an untrained net's argmax repeats itself).
    rows = [{k: float(v) for k, v in row.items() if k in ("frame", "epsilon", "top_action_share")}
            for row in csv_rows(tmp_path / "run" / "train.csv")]
    early_rows = [r for r in rows if early.span[0] < r["frame"] <= early.span[1]]
    late_rows = [r for r in rows if r["frame"] > late.span[0]]
    assert early_rows and late_rows
    # The learner's own (logged) epsilon, from its options held as the actors'.
    assert all(r["epsilon"] > 0.999 for r in early_rows)
    assert all(r["epsilon"] < 0.02 for r in late_rows)
    assert (statistics.mean(r["top_action_share"] for r in early_rows) < 0.2
            < statistics.mean(r["top_action_share"] for r in late_rows))


def test_the_late_phase_needs_a_window_of_frames(capsys):
    from ellm_tools.bench.__main__ import main

    with pytest.raises(SystemExit):
        main(["--late", "--frames", "0", "--prefill", "0", "num_actors=2"])
    assert "--late needs" in capsys.readouterr().err


class _FakeCollector:
    """Steps from the given sources, each taking ``slow`` seconds until the ``fast_from``-th."""

    def __init__(self, sources: list[int], slow: float, fast_from: int):
        self.sources, self.slow, self.fast_from, self.taken = sources, slow, fast_from, 0

    def next(self, timer):
        if self.taken < self.fast_from:
            time.sleep(self.slow)
        self.taken += 1
        return SimpleNamespace(source=self.sources[self.taken - 1])


@dataclasses.dataclass(frozen=True)
class _Frames:
    num_train_frames: int


def _run_clock(clock_args, sources, fast_from, frames, most=100):
    """A loop as the workspace's: steps until the frame counter reaches ``num_train_frames``,
    read before each step."""
    collector = _FakeCollector(sources, 0.05, fast_from)

    @contextlib.contextmanager
    def plain():
        yield collector

    ws = SimpleNamespace(collector=plain, run=_Frames(frames))
    clock = _LoopClock(ws, *clock_args, most=most)
    with ws.collector() as c:
        while c.taken < ws.run.num_train_frames:
            c.next(None)
    return clock


def test_the_loop_clock_times_only_the_steps_after_every_actors_warmup():
    # Actor 1 sends its first step fourth: it and the next are the warm-up, then the window's
    # 4 steps are timed.
    clock = _run_clock((2, 2), [0, 0, 0, 1, 0, 1, 0, 1, 0], fast_from=5, frames=4)
    assert (clock.timed, clock.untimed) == (4, 5) and clock.seconds() < 0.04
    one = _run_clock((0, 1), [0] * 5, fast_from=2, frames=5)  # one process: all, from the start
    assert (one.timed, one.untimed) == (5, 0) and one.seconds() >= 0.1
    # Actor 1 never sends a step: the warm-up lengthens the window by at most ``most`` steps.
    never = _run_clock((2, 2), [0] * 9, fast_from=0, frames=4, most=5)
    assert (never.timed, never.untimed) == (0, 9)
    with pytest.raises(RuntimeError, match="no step was timed in 9 steps"):
        never.seconds()


def test_a_slow_actor_lengthens_the_warmup_not_the_timed_window():
    # Actor 0 sends more steps than the window has before actor 1 sends its first (an actor
    # whose start-up lags under load): the window still times its 4 steps, after the warm-up.
    sources = [0] * 6 + [1, 0, 1, 0, 1, 0]
    clock = _run_clock((2, 2), sources, fast_from=8, frames=4)
    assert (clock.timed, clock.untimed) == (4, 8) and clock.seconds() < 0.04
