"""Actors beside the learner (``num_actors``): the frame and update accounting of a run, its
resumption, and its faults (an actor that raises or is killed, a killed main process, Ctrl-C),
through ``python train.py`` with tiny budgets; the counting and sharing pieces in process."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing.synchronize
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import PRETRAIN, ROOT, TINY, csv_rows, find_run, train_env
from hydra import compose, initialize_config_dir

from ellm.actors import (
    ActorFailed,
    ActorPool,
    actor_seed,
    lm_budget_share,
)
from ellm.actors.shared import SharedPolicy
from ellm.actors.worker import Actor
from ellm.agent.dqn import DQNAgent
from ellm.loop.workspace import updates_due
from ellm.run.config import validate
from ellm.run.lm_usage import lm_counts_on, pool_lm_metrics

SEED_FRAMES, EVERY = 60, 4  # TINY's num_seed_frames, the default agent.update_every_steps
# Episodes of 80 steps: two chunks each (64 + 16), so the two actors' chunks interleave.
ACTORS = [*PRETRAIN, *[a for a in TINY if not a.startswith(("num_train_frames",
                                                              "eval_every_frames",
                                                              "env_spec.length"))],
          "env_spec.length=80", "eval_every_frames=160", "num_actors=2"]
LONG = [*[a for a in ACTORS if not a.startswith("eval_every_frames")],
        "num_train_frames=1000000", "eval_every_frames=1000000"]


def test_updates_due_counts_the_frames_of_the_one_process_loop():
    for seed_frames, every, since in ((60, 4, 0), (0, 4, 0), (5, 3, 0), (60, 4, 97)):
        made = 0
        for frame in range(1, 400):
            made += frame >= max(seed_frames, since) and frame % every == 0
            assert updates_due(frame, seed_frames, every, since) == made


def test_lm_counters_of_several_processes_pool_into_one():
    pooled = pool_lm_metrics([
        {"queries": 10.0, "api_calls": 2.0, "latency_s": 1.0, "budget_spent": 0.5,
         "budget_exhausted": 0.0, "constraint_refused": 1.0, "in_flight": 2.0},
        {"queries": 5.0, "api_calls": 6.0, "latency_s": 3.0, "budget_spent": 0.25,
         "budget_exhausted": 1.0, "constraint_refused": 1.0, "in_flight": 1.0},
    ])
    assert pooled == {"queries": 15.0, "api_calls": 8.0, "latency_s": 2.5,
                      "budget_spent": 0.75, "budget_exhausted": 1.0,
                      "constraint_refused": 1.0, "in_flight": 3.0}


def test_lm_counters_of_a_resumed_run_count_on_from_the_snapshot():
    before = {"queries": 10.0, "api_calls": 2.0, "latency_s": 1.0, "budget_exhausted": 1.0,
              "constraint_refused": 1.0, "in_flight": 2.0}
    part = {"queries": 5.0, "api_calls": 2.0, "latency_s": 3.0, "budget_exhausted": 0.0,
            "constraint_refused": 0.0}
    # Counts add up; the gauges are the resumed part's (a gauge it lacks is not carried on).
    assert lm_counts_on(before, part) == {"queries": 15.0, "api_calls": 4.0, "latency_s": 2.0,
                                          "budget_exhausted": 0.0, "constraint_refused": 0.0}
    assert lm_counts_on({}, part) == part


def _config(*overrides: str):
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        return compose("config", overrides=["device=cpu", *overrides])


def test_each_process_gets_a_share_of_the_lm_budget_and_each_actor_its_own_worlds():
    lm = validate(_config("env_spec.lm_spec.budget=3")).lm
    assert lm_budget_share(lm, 3).budget == pytest.approx(1.0)
    # a resumed run shares what its earlier parts left, and never less than nothing
    assert lm_budget_share(lm, 3, spent=1.5).budget == pytest.approx(0.5)
    assert lm_budget_share(lm, 3, spent=4.0).budget == 0.0
    assert lm.budget == 3  # the run's spec is left as it was
    assert lm_budget_share(lm, 3) == dataclasses.replace(lm, budget=1.0)  # nothing else changes
    seeds = {actor_seed(seed, i) for seed in (1, 2) for i in range(4)}
    assert len(seeds) == 8


def _agent(seed: int) -> DQNAgent:
    return DQNAgent((4, 84, 84), 5, hidden_dim=32, seed=seed)


def test_shared_weights_reach_an_actor_only_when_their_version_moved():
    learner, actor = _agent(0), _agent(1)
    policy = SharedPolicy(torch.multiprocessing.get_context("spawn"), learner.policy_state())
    assert set(policy.state) == {"online", "text_encoder_seed"}  # no target, no optimiser
    optimizer, target = actor.optimizer, actor.target.state_dict()
    version = policy.refresh(actor, 0)
    assert actor.optimizer is optimizer  # acting builds no optimiser and moves no target
    for name, value in target.items():
        assert torch.equal(actor.target.state_dict()[name], value), name
    for name, value in learner.online.state_dict().items():
        assert torch.equal(actor.online.state_dict()[name], value), name
    with torch.no_grad():
        for p in learner.online.parameters():
            p.add_(1.0)
    assert policy.refresh(actor, version) == version  # nothing published yet: no load
    assert not torch.equal(next(actor.online.parameters()), next(learner.online.parameters()))
    policy.publish(learner.policy_state(), waiting=lambda: None)
    assert policy.refresh(actor, version) == version + 1
    assert torch.equal(next(actor.online.parameters()), next(learner.online.parameters()))


def _take_the_locks_and_die(locks) -> None:
    for lock in locks:
        lock.acquire(False)  # a condition's semaphores start at 0: those stay free
    os.kill(os.getpid(), signal.SIGKILL)


def _locks(thing: object, depth: int = 0) -> list:
    """Every process-shared lock or semaphore reachable from ``thing``'s attributes."""
    if isinstance(thing, multiprocessing.synchronize.SemLock):
        return [thing]
    if depth > 4 or not type(thing).__module__.startswith(("ellm", "multiprocessing")):
        return []
    return [lock for value in getattr(thing, "__dict__", {}).values()
            for lock in _locks(value, depth + 1)]


def _finishes(call, timeout: float = 20.0) -> BaseException | None:
    """What ``call`` raised, run in a thread that must finish within ``timeout``."""
    raised: list[BaseException | None] = [None]

    def run():
        try:
            call()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            raised[0] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{call} still waits after {timeout} s"
    return raised[0]


def test_an_actor_killed_holding_every_shared_lock_stops_the_run_without_waiting():
    """Those locks are never given back: the learner's publish names the dead actor instead of
    waiting for good, another actor's refresh gives up once the run stops, and the pool stops."""
    learner = _agent(0)
    pool = ActorPool(validate(_config()), 2, learner.policy_state(), frame=0, decay_from=None)
    locks = _locks(pool.policy) + _locks(pool.shared)
    assert pool.policy.lock in locks and pool.shared.handover in locks
    # Forked, it starts at once and shares the pool's locks as its actors would.
    dying = torch.multiprocessing.get_context("fork").Process(target=_take_the_locks_and_die,
                                                              args=(locks,))
    dying.start()
    dying.join(timeout=30)
    assert dying.exitcode == -signal.SIGKILL
    pool.processes = [dying]
    failed = _finishes(lambda: pool.publish(learner.policy_state()))
    assert isinstance(failed, ActorFailed)
    assert str(failed).startswith(f"actor 0 (pid {dying.pid}) was killed by SIGKILL")
    actor = _agent(1)
    before = next(actor.online.parameters()).clone()
    assert _finishes(lambda: pool.__exit__(None, None, None)) is None
    assert pool.shared.stop.is_set()
    assert pool.policy.refresh(actor, 0, pool.shared.stop) == 0  # keeps what it held
    assert torch.equal(next(actor.online.parameters()), before)


@pytest.mark.e2e
def test_an_actor_that_raises_stops_the_run_with_its_traceback(caplog):
    run = validate(_config())
    # the actor fails to build its env
    run = dataclasses.replace(run, env=dataclasses.replace(run.env, name="NoSuchGame-v0"))
    pool = ActorPool(run, 1, _agent(0).state_dict(), frame=0, decay_from=None)
    with pytest.raises(ActorFailed, match=r"actor 0 \(pid \d+\) failed: .*NoSuchGame-v0"), pool:
        pool.receive()
    assert "Traceback" in caplog.text and "make_env" in caplog.text
    assert pool.processes[0].exitcode == 1


@pytest.mark.e2e
def test_frames_are_the_totals_of_all_actors_and_updates_keep_the_ratio(train, tmp_path):
    train(*ACTORS, "num_train_frames=320", "exp_name=ACT")
    out = find_run(tmp_path, "ACT")
    _check_accounting(out, last_frame=320)
    assert [int(r["frame"]) for r in csv_rows(out / "eval.csv")] == [0, 160, 320]
    log = (out / "train.log").read_text()
    assert len(set(re.findall(r"actor (\d) started: pid (\d+)", log))) == 2
    meta = torch.load(out / "snapshot.pt", weights_only=True)["meta"]
    assert meta["frame"] == 320 and len(meta["actor_env_episodes"]) == 2
    assert sum(meta["actor_env_episodes"]) >= 2

    # Resumed: the counters go on from the snapshot, the actors to new worlds.
    train(*ACTORS, f"snapshot_path={out}", "num_train_frames=480", "exp_name=ACT")
    _check_accounting(out, last_frame=480)
    resumed = torch.load(out / "snapshot.pt", weights_only=True)["meta"]
    assert resumed["frame"] == 480
    pairs = list(zip(meta["actor_env_episodes"], resumed["actor_env_episodes"]))
    assert all(after >= before for before, after in pairs)  # never back to the first worlds
    assert any(after > before for before, after in pairs)
    assert [int(r["frame"]) for r in csv_rows(out / "eval.csv")] == [0, 160, 320, 480]
    queries = [float(r["queries"]) for r in csv_rows(out / "lm.csv")]  # all processes' counts
    assert queries == sorted(queries) and queries[-1] > queries[2] > 0  # on from the snapshot


@pytest.mark.e2e
def test_the_texts_actors_embedded_to_act_reach_the_learner(train, tmp_path):
    # Half the actors' steps greedy, so that they embed texts to act (a greedy policy may end
    # an episode early, which the accounting test above rules out by acting at random).
    # Every process of the run records the named semaphores it registers for unlinking and
    # unregisters once unlinked (`sitecustomize` runs at each interpreter's start).
    tracer, record = tmp_path / "tracer", tmp_path / "semaphores.txt"
    tracer.mkdir()
    (tracer / "sitecustomize.py").write_text(SEMAPHORE_TRACER)
    path = os.pathsep.join(p for p in (str(tracer), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = train(*ACTORS, "agent.train_eps_max=0.5", "agent.train_eps_min=0.5",
                   "num_train_frames=160", "exp_name=TXT",
                   extra_env={"PYTHONPATH": path, "SEMAPHORE_RECORD": str(record)})
    log = (find_run(tmp_path, "TXT") / "train.log").read_text()
    counts = re.search(r"learner text embeddings: (\d+) encoded here, (\d+) shipped", log)
    assert counts and int(counts[2]) > 0, log[-2000:]
    # The actors leave with os._exit, which skips unlinking: one that made a named semaphore
    # (tqdm's default lock, for SBERT's bar) left it to the resource tracker, which warned.
    lines = [line.split() for line in record.read_text().splitlines()]
    made = {name: pid for what, pid, name in lines if what == "register"}
    unlinked = {name for what, _, name in lines if what == "unregister"}
    assert made  # the learner's locks shared with the actors, at least
    assert {name: pid for name, pid in made.items() if name not in unlinked} == {}
    assert "leaked semaphore" not in result.stderr


SEMAPHORE_TRACER = """
import os
from multiprocessing import resource_tracker

def _recording(call, what):
    def recorded(name, rtype):
        if rtype == "semaphore":
            with open(os.environ["SEMAPHORE_RECORD"], "a") as f:
                f.write(f"{what} {os.getpid()} {name}\\n")
        return call(name, rtype)
    return recorded

resource_tracker.register = _recording(resource_tracker.register, "register")
resource_tracker.unregister = _recording(resource_tracker.unregister, "unregister")
"""


def _check_accounting(out: Path, last_frame: int) -> None:
    rows = csv_rows(out / "train.csv")
    frames = [int(r["frame"]) for r in rows]
    assert frames == sorted(set(frames)) and frames[-1] <= last_frame
    for row, frame in zip(rows, frames):
        # Every update due by this frame is made: as many as the one-process loop makes.
        assert int(float(row["updates"])) == updates_due(frame, SEED_FRAMES, EVERY), row
        assert abs(int(float(row["updates"])) - (frame - SEED_FRAMES) / EVERY) <= 1
        # The actor's own rollout measures its episode's exploration (80 steps).
        assert 1 <= float(row["coverage"]) <= 81 and 0 <= float(row["distinct_captions"]) <= 80
    # Each row is one finished episode of one actor; the replay holds them whole.
    episodes = sorted((out / "buffer").glob("*.npz"))
    assert len(episodes) == len(rows) and all(p.stem.endswith("_80") for p in episodes)
    assert int(float(rows[-1]["buffer_size"])) == 80 * len(rows)
    assert any(float(r["coverage"]) > 1 for r in rows)  # the seed frames act at random
    stats = [json.loads(line)["frame"]
             for line in (out / "train" / "stats.jsonl").read_text().splitlines()]
    assert stats == frames


@pytest.fixture
def start(tmp_path):
    """Starts a long run with two actors and returns, once both actors are ready and training
    rows appear (``started_only``: once both are started), (process, run dir, actor pids); a
    run still going when the test ends is killed (its actors die with it)."""
    started: list[subprocess.Popen] = []

    def run(exp: str, started_only: bool = False) -> tuple[subprocess.Popen, Path, dict[int, int]]:
        args = [sys.executable, str(ROOT / "train.py"), *LONG, f"exp_name={exp}"]
        # A process started with SIGINT ignored (a shell's background job: pytest run with `&`)
        # passes the ignore on to its children, and Python then never raises KeyboardInterrupt.
        # The run is given the default, as a terminal's Ctrl-C would find it.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen(args, cwd=tmp_path,
                                    env=train_env(tmp_path, {"PYTHONPATH": str(ROOT)}),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        finally:
            signal.signal(signal.SIGINT, previous)
        started.append(proc)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            found = list(tmp_path.glob(f"exp_local/*/{exp}_*/train.log"))
            log = found[0].read_text() if found else ""
            pids = {int(i): int(p)
                    for i, p in re.findall(r"actor (\d) started: pid (\d+)", log)}
            if started_only and len(pids) == 2:
                return proc, found[0].parent, pids
            rows = found[0].parent / "train.csv" if found else None
            if (not started_only and log.count(": ready in ") == 2 and rows.exists()
                    and len(csv_rows(rows)) >= 2):
                return proc, found[0].parent, pids
            time.sleep(0.05 if started_only else 0.5)
        raise AssertionError(f"no training rows: {proc.communicate(timeout=60)[1][-3000:]}")

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _alive(pid: int) -> bool:
    """A process that runs (a zombie waiting to be reaped does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def _gone(pids, timeout: float = 30.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.e2e
def test_an_actor_killed_mid_run_stops_the_run_naming_it(start):
    proc, out, pids = start("KILLACTOR")
    os.kill(pids[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    message = f"actor 1 (pid {pids[1]}) was killed by SIGKILL"
    assert message in err and message in (out / "train.log").read_text()
    assert _gone(pids.values())


@pytest.mark.e2e
def test_kill_9_of_the_main_process_leaves_no_actor(start):
    proc, _, pids = start("KILLMAIN")
    assert len(pids) == 2 and all(_alive(pid) for pid in pids.values())
    proc.kill()
    proc.communicate()
    assert _gone(pids.values()), "an actor outlived the main process"


@pytest.mark.e2e
def test_ctrl_c_stops_the_actors_and_the_run_cleanly(start):
    proc, out, pids = start("CTRLC")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "interrupted at frame" in err and "Traceback" not in err
    assert _gone(pids.values(), timeout=1.0)  # joined before the main process ended
    log = (out / "train.log").read_text()
    assert "did not stop" not in log and "was still starting" not in log  # each by itself
    assert "interrupted at frame" in log.splitlines()[-1]  # the log says how it ended


@pytest.mark.e2e
def test_ctrl_c_while_the_actors_start_up_does_not_wait_for_them(start):
    """An actor still importing and building (4-8 s here) has sent nothing: it is terminated
    at once, not waited for until it would see the stop event. The SIGINT comes once the main
    process's first evaluation is done, while the actors build (an actor that happened to be
    built by then stops by itself, as in the test above)."""
    proc, out, pids = start("CTRLC_START", started_only=True)
    deadline = time.time() + 120
    while "[eval @ 0 frames]" not in (out / "train.log").read_text() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "interrupted at frame" in err and "Traceback" not in err
    assert _gone(pids.values(), timeout=1.0)
    log = (out / "train.log").read_text()
    assert "did not stop" not in log
    stopped = [f"actor {i} (pid {pid}) was still starting: terminated" in log
               for i, pid in pids.items()]
    ready = [f"actor {i}: ready in " in log for i in pids]
    assert all(s != r for s, r in zip(stopped, ready, strict=True)), log
    assert any(stopped), "both actors were built before the Ctrl-C: nothing was tested"


@pytest.mark.e2e
def test_an_actor_acts_at_the_decayed_epsilon_from_its_first_step(monkeypatch):
    # decay_after_reward: a resumed run whose rewards already started the decay starts its
    # actors with decay_from set; their very first steps must not act at the held epsilon 1.
    run = validate(_config(*PRETRAIN, "decay_after_reward=true", "agent.train_eps_decay_steps=100"))
    shapes = ActorPool(run, 1, _agent(0).state_dict(), frame=0, decay_from=None)
    actor = Actor(shapes.specs[0], shapes.policy, shapes.shared, None)
    # The pool of the resumed run, sharing weights of the actor's own shapes.
    pool = ActorPool(run, 1, actor.agent.policy_state(), frame=10_000, decay_from=50)
    actor.policy, actor.shared = pool.policy, pool.shared
    assert actor.agent.epsilon(10_000) == 1.0  # held until told where the decay started
    first: list[float] = []

    def one_episode() -> None:
        first.append(actor.agent.epsilon(pool.shared.frame.value))
        pool.shared.stop.set()

    monkeypatch.setattr(actor, "_episode", one_episode)
    actor.run()
    assert first == [pytest.approx(run.agent.train_eps_min)]
