"""`env_spec.lm_spec.blocking=false` with the real `openai` client against the scripted server.

A cached state is answered at once; a miss gets the episode's last answered goals while its
request runs in a bounded pool; the answer is cached under its own prompt and served on the
next visit. Faults (slow, failing, garbage, vanished server, spent budget, end of run, kill -9)
never stop training, are counted, and never cache an answer twice or under another prompt.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, csv_rows, find_run, train_env
from hydra import compose, initialize_config_dir
from openai_test_server import OpenAITestServer, Reply

from ellm.games.crafter.state import TextState
from ellm.games.crafter.suggesters import build_suggester
from ellm.lm import GPTLanguageModel, NonBlockingLanguageModel
from ellm.lm.nonblocking import fallback_warning
from ellm.run.config import ConfigError, validate
from lmclient.cache import CACHE_FILE
from lmclient.client import LMConfigError

SLOW = 0.6  # seconds a slow answer takes; a step must never wait for it

pytestmark = pytest.mark.usefixtures("no_real_keys")


def make(server: OpenAITestServer, tmp_path: Path, **kw: Any) -> NonBlockingLanguageModel:
    spec = {"lm_class": "GPTLanguageModel", "lm": "test-model", "timeout": 5.0,
            "max_retries": 1, "backoff": 0.0, "max_backoff": 0.05, "blocking": False, **kw}
    lm = build_suggester(spec, all_goals=[], cache_dir=tmp_path / "cache",
                         base_url=server.base_url)
    assert isinstance(lm, NonBlockingLanguageModel)
    return lm


def state(name: str) -> TextState:
    return TextState(f"You see {name}.")


def tag(prompt: Any) -> str:
    """A goal naming the prompt it answers: 'note <8 hex digits of its hash>'."""
    return "note " + hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()[:8]


def tagged(body: dict[str, Any], delay: float = 0.0) -> Reply:
    return Reply.bullets("chop tree", tag(body.get("messages", body.get("prompt"))),
                         delay=delay)


def settle(*lms: NonBlockingLanguageModel, timeout: float = 10.0) -> None:
    """Wait until no request of ``lms`` is in flight (the answers are then cached)."""
    deadline = time.monotonic() + timeout
    while any(lm.in_flight for lm in lms):
        assert time.monotonic() < deadline, "requests still in flight"
        time.sleep(0.01)


def timed(lm: NonBlockingLanguageModel, s: TextState) -> tuple[list[str], float]:
    start = time.monotonic()
    goals = lm.suggest(s)
    return goals, time.monotonic() - start


def cached_rows(cache_dir: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(cache_dir / CACHE_FILE) as conn:
        return conn.execute("SELECT key, prompt, text FROM answers").fetchall()


# ---------------------------------------------------------------------------------- the mode
def test_blocking_is_the_default_and_offline_suggesters_never_need_a_pool(server, tmp_path):
    spec = {"lm_class": "GPTLanguageModel", "lm": "test-model"}
    lm = build_suggester(spec, all_goals=[], cache_dir=tmp_path, base_url=server.base_url)
    assert type(lm) is GPTLanguageModel
    assert "fallback_steps" not in lm.metrics()  # the blocking mode's metrics are unchanged
    dummy = build_suggester({**spec, "dummy_lm": True, "blocking": False}, all_goals=[],
                            cache_dir=tmp_path)
    assert type(dummy) is GPTLanguageModel


def test_slow_answer_gives_fallback_goals_then_the_cached_answer(server, tmp_path):
    lm = make(server, tmp_path)
    server.push(Reply.bullets("chop tree", "drink water"), Reply.bullets("attack cow", delay=SLOW))
    assert lm.suggest(state("tree")) == []  # nothing answered yet this episode
    settle(lm)
    assert lm.suggest(state("tree")) == ["chop tree", "drink water"]  # the next visit
    lm.mark_achieved("chop tree")
    goals, seconds = timed(lm, state("cow"))  # a slow miss: the last answered goals, filtered
    assert goals == ["drink water"] and seconds < SLOW / 3
    assert lm.metrics()["in_flight"] == 1
    settle(lm)
    assert lm.suggest(state("cow")) == ["attack cow"]
    lm.reset()  # a new episode starts with no fallback goals
    server.push(Reply.bullets("drink water", delay=SLOW))
    assert lm.suggest(state("water")) == []
    settle(lm)
    m = lm.metrics()
    assert (m["queries"], m["cache_hits"], m["fallback_steps"], m["api_calls"]) == (5, 2, 3, 3)
    assert m["in_flight"] == 0 and m["pool_full"] == 0 and m["api_errors"] == 0
    assert 0 < m["wait_seconds"] < SLOW  # never waited for an answer
    lm.close()


def test_late_answers_are_cached_under_the_prompt_that_asked(server, tmp_path):
    # Answers arrive in the reverse order of the questions.
    states = [state(f"tree number {i}") for i in range(4)]
    delays = iter([0.4, 0.3, 0.2, 0.1])
    server.responder = lambda body: tagged(body, next(delays))
    lm = make(server, tmp_path, max_in_flight=4)
    assert all(lm.suggest(s) == [] for s in states)
    settle(lm)
    for s in states:
        assert lm.suggest(s) == ["chop tree", tag(lm.request(s))]
    rows = cached_rows(tmp_path / "cache")
    assert len(rows) == 4
    for _, prompt, text in rows:
        assert tag(json.loads(prompt)) in text
    lm.close()


def test_a_prompt_in_flight_is_not_sent_twice(server, tmp_path):
    server.push(Reply.bullets("chop tree", delay=SLOW))
    train, evaluate = make(server, tmp_path), make(server, tmp_path)
    for _ in range(5):
        train.suggest(state("tree"))
        evaluate.suggest(state("tree"))  # the other suggester of the run: not sent either
    assert train.in_flight == 1 and evaluate.in_flight == 0
    settle(train)
    assert train.suggest(state("tree")) == evaluate.suggest(state("tree")) == ["chop tree"]
    assert len(server.requests) == 1 and len(cached_rows(tmp_path / "cache")) == 1
    assert train.metrics()["fallback_steps"] == evaluate.metrics()["fallback_steps"] == 5
    train.close()
    evaluate.close()


def test_the_pool_is_bounded(server, tmp_path):
    server.default = Reply.bullets("chop tree", delay=SLOW)
    lm = make(server, tmp_path, max_in_flight=2)
    states = [state(f"tree number {i}") for i in range(5)]
    assert [lm.suggest(s) for s in states] == [[]] * 5
    assert lm.metrics()["in_flight"] == 2 and lm.metrics()["pool_full"] == 3
    time.sleep(0.1)
    assert len(server.requests) == 2
    settle(lm)
    assert len(cached_rows(tmp_path / "cache")) == 2
    for s in states[2:]:  # the misses not sent are asked on a later visit, two at a time
        lm.suggest(s)
    assert lm.metrics()["in_flight"] == 2 and lm.metrics()["pool_full"] == 4
    settle(lm)
    lm.suggest(states[4])
    settle(lm)
    assert len(server.requests) == 5 == len(cached_rows(tmp_path / "cache"))
    assert lm.metrics()["api_calls"] == 5
    lm.close()


# ---------------------------------------------------------------------------------- faults
def test_errors_are_counted_not_cached_and_asked_again(server, tmp_path):
    server.push(Reply.error(500), Reply.error(503), Reply.bullets("chop tree"))
    lm = make(server, tmp_path)  # max_retries=1: two attempts
    assert lm.suggest(state("tree")) == []
    settle(lm)
    assert lm.metrics()["api_errors"] == 1 and not cached_rows(tmp_path / "cache")
    assert lm.suggest(state("tree")) == []  # not cached: sent again
    settle(lm)
    assert lm.suggest(state("tree")) == ["chop tree"]
    m = lm.metrics()
    assert (m["api_calls"], m["retries"], m["api_errors"], m["fallback_steps"]) == (3, 1, 1, 2)
    lm.close()


def test_slow_server_times_out_and_is_counted(server, tmp_path):
    server.push(Reply("- too late", delay=3.0), Reply("- too late", delay=3.0))
    lm = make(server, tmp_path, timeout=0.2)
    goals, seconds = timed(lm, state("tree"))
    assert goals == [] and seconds < 0.1
    settle(lm)
    assert lm.metrics()["api_errors"] == 1 and lm.metrics()["api_calls"] == 2
    lm.close()


def test_an_answer_without_goals_is_a_parse_error_cached_once(server, tmp_path):
    server.push(Reply("I would chop the tree."))
    lm = make(server, tmp_path)
    assert lm.suggest(state("tree")) == []
    settle(lm)
    assert lm.suggest(state("tree")) == [] and lm.suggest(state("tree")) == []
    m = lm.metrics()
    assert (m["parse_errors"], m["api_errors"], m["api_calls"], m["cache_hits"]) == (2, 0, 1, 2)
    assert len(server.requests) == 1 and len(cached_rows(tmp_path / "cache")) == 1
    lm.close()


def test_garbage_is_an_api_error_never_cached_and_asked_again(server, tmp_path):
    server.push(Reply.garbage())
    lm = make(server, tmp_path)
    assert lm.suggest(state("tree")) == []
    settle(lm)
    assert len(cached_rows(tmp_path / "cache")) == 0
    assert lm.suggest(state("tree")) == []  # fallback goals (none yet); asked again
    settle(lm)
    assert lm.suggest(state("tree")) == ["chop tree", "drink water"]
    m = lm.metrics()
    assert (m["parse_errors"], m["api_errors"], m["api_calls"], m["cache_hits"]) == (0, 1, 2, 1)
    assert len(server.requests) == 2 and len(cached_rows(tmp_path / "cache")) == 1
    lm.close()


def test_a_vanished_server_is_counted_and_training_goes_on(server, tmp_path):
    lm = make(server, tmp_path)
    server.push(Reply.bullets("chop tree"), Reply.bullets("never sent", delay=5.0))
    lm.suggest(state("tree"))
    settle(lm)
    assert lm.suggest(state("tree")) == ["chop tree"]
    lm.suggest(state("cow"))  # in flight when the server goes away
    time.sleep(0.1)
    server.stop()
    settle(lm)
    assert lm.suggest(state("water")) == ["chop tree"]  # fallback; sent to nobody
    settle(lm)
    assert lm.suggest(state("tree")) == ["chop tree"]  # the cache still answers
    m = lm.metrics()
    assert m["api_errors"] == 2 and m["in_flight"] == 0
    assert len(cached_rows(tmp_path / "cache")) == 1
    lm.close()


def test_a_refused_configuration_stops_the_run(server, tmp_path):
    server.push(Reply.error(401))
    lm = make(server, tmp_path)
    assert lm.suggest(state("tree")) == []
    settle(lm)
    with pytest.raises(LMConfigError, match="HTTP 401"):
        lm.suggest(state("cow"))
    lm.close()


def test_budget_exhaustion_loses_and_double_counts_nothing(server, tmp_path):
    # $1 per answer; the budget is checked when a request is sent, so the two requests in
    # flight when it runs out still land: cached, counted, paid once.
    server.default = Reply.bullets("chop tree", delay=0.2)
    lm = make(server, tmp_path, budget=2.5, price=[10000, 0], max_in_flight=2)
    for batch in (["a", "b"], ["c", "d"], ["e", "f"]):
        for name in batch:
            lm.suggest(state(name))
        settle(lm)
    m = lm.metrics()
    assert (m["api_calls"], m["budget_refusals"], m["budget_exhausted"]) == (4, 2, 1)
    assert m["dollars"] == m["budget_spent"] == 4.0
    assert len(cached_rows(tmp_path / "cache")) == 4 == len(server.requests)
    assert lm.suggest(state("d")) == ["chop tree"]  # cached answers are still served
    lm.close()


def test_close_waits_for_answers_in_flight_and_stops_retrying(server, tmp_path):
    server.push(*[Reply.bullets("chop tree", delay=0.3)] * 3)
    lm = make(server, tmp_path)
    for name in ("a", "b", "c"):
        lm.suggest(state(name))
    lm.close()  # nothing written is lost: the three answers are cached and counted
    m = lm.metrics()
    assert len(cached_rows(tmp_path / "cache")) == 3
    assert (m["api_calls"], m["in_flight"], m["prompt_tokens"]) == (3, 0, 300)
    assert m["wait_seconds"] >= 0.2
    lm.close()  # idempotent

    # A failing request at the end of the run is not retried after its backoff.
    server.push(Reply.error(500), Reply.bullets("too late"))
    lm = make(server, tmp_path, max_retries=3, backoff=30, max_backoff=30)
    lm.suggest(state("tree"))
    time.sleep(0.2)
    start = time.monotonic()
    lm.close()
    assert time.monotonic() - start < 5
    assert lm.metrics()["api_errors"] == 1 and lm.metrics()["api_calls"] == 1


def test_the_local_server_has_no_parallel_slots_as_documented():
    # docs/lm.md: llama-cpp-python's server runs one completion at a time and has no option to
    # run several; this fails when an installed version gains one, so the docs get updated.
    settings = pytest.importorskip("llama_cpp.server.settings")
    fields = {*settings.ModelSettings.model_fields, *settings.ServerSettings.model_fields}
    assert not {f for f in fields if "parallel" in f or "slot" in f or "n_seq" in f}
    app = Path(settings.__file__).with_name("app.py").read_text()
    assert "llama_outer_lock" in app and "llama_inner_lock" in app


def test_a_run_mostly_on_fallback_goals_is_told_what_to_change():
    slow = fallback_warning({"queries": 1011.0, "fallback_steps": 771.0, "api_calls": 9.0})
    assert slow is not None and slow.startswith("76% of the LM queries (771 of 1011) got "
                                                "fallback goals")
    assert "python -m ellm_tools.serve --parallel N" in slow
    assert "env_spec.lm_spec.max_in_flight=N" in slow and "faster server" in slow
    assert fallback_warning({"queries": 1000.0, "fallback_steps": 100.0}) is None  # 10%: fine
    assert fallback_warning({"queries": 1000.0}) is None  # blocking: no fallback at all
    assert fallback_warning({}) is None  # no LM queries (oracle, baselines)


# ---------------------------------------------------------------------------------- config
def config(*overrides: str):
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("overrides, key", [
    (["env_spec.lm_spec.blocking=maybe"], "env_spec.lm_spec.blocking"),
    (["env_spec.lm_spec.max_in_flight=0"], "env_spec.lm_spec.max_in_flight"),
    (["env_spec.name=Housekeep", "env_spec.lm_spec.lm_class=GPTLanguageModel",
      "env_spec.lm_spec.blocking=false"], "env_spec.lm_spec.blocking"),
])
def test_bad_values_name_their_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(config(*overrides))


# ---------------------------------------------------------------------------------- train.py
def lm_overrides(server: OpenAITestServer, exp_name: str, frames: int) -> list[str]:
    return [
        f"exp_name={exp_name}", "use_goal=True", "env_spec.use_sbert=True",
        "use_language_state=sbert", "env_spec.lm_spec.lm_class=GPTLanguageModel",
        "env_spec.lm_spec.lm=test-model", f"env_spec.lm_spec.base_url={server.base_url}",
        "env_spec.lm_spec.blocking=false", "env_spec.lm_spec.max_in_flight=3",
        "env_spec.lm_spec.max_retries=1", "env_spec.lm_spec.timeout=2",
        "+env_spec.lm_spec.backoff=0", f"num_train_frames={frames}", "num_seed_frames=40",
        "eval_every_frames=40", "num_eval_episodes=1", "env_spec.length=40",
        "replay_buffer_num_workers=0", "batch_size=8", "progress=false",
    ]


def snapshot_frame(path: Path) -> int:
    return int(torch.load(path, weights_only=True)["meta"]["frame"])


def prompt_of(body: dict[str, Any]) -> Any:
    return body.get("messages", body.get("prompt"))


def assert_each_answer_under_its_prompt(cache_dir: Path) -> None:
    rows = cached_rows(cache_dir)
    assert rows
    for _, prompt, text in rows:
        if text.startswith("- "):
            assert tag(json.loads(prompt)) in text


@pytest.mark.e2e
def test_train_without_waiting_through_slow_failing_garbage_and_vanished_server(train, server,
                                                                               tmp_path):
    kinds = ["ok", "garbage", "slow", "error"]  # the 5th new prompt finds the server gone
    seen: dict[str, str] = {}

    def responder(body: dict[str, Any]) -> Reply:
        key = json.dumps(prompt_of(body), sort_keys=True)
        kind = seen.setdefault(key, kinds[len(seen)] if len(seen) < len(kinds) else "gone")
        if kind == "gone" and not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.stop, daemon=True).start()
        if kind in ("error", "gone"):  # "gone": never delivered, the server is stopping
            return Reply.error(500)
        if kind == "garbage":
            return Reply.garbage()
        return tagged(body, SLOW if kind == "slow" else 0.05)

    stopping = threading.Event()
    server.responder = responder
    proc = train(*lm_overrides(server, "NB", 120), timeout=200)
    run = find_run(tmp_path, "NB")
    assert int(csv_rows(run / "train.csv")[-1]["frame"]) == 120
    assert stopping.is_set(), "the server should have gone away mid-run"
    lm = csv_rows(run / "lm.csv")[-1]
    assert float(lm["fallback_steps"]) > 0 and float(lm["in_flight"]) == 0
    assert float(lm["api_errors"]) >= 2  # the failing prompt's and the garbage's
    assert float(lm["cache_hits"]) > 0 and float(lm["wait_seconds"]) >= 0
    assert_each_answer_under_its_prompt(tmp_path / "lm_cache")
    # One process: no prompt was sent twice, except after a failure (garbage is not cached).
    sent = [json.dumps(prompt_of(r.body), sort_keys=True) for r in server.requests]
    again = {p for p in sent if sent.count(p) > 1}
    assert all(seen[p] in ("error", "gone", "garbage") for p in again)
    # A readable console: no per-request HTTP lines.
    assert "HTTP Request" not in proc.stdout + proc.stderr
    assert "non-blocking LM" in proc.stdout + proc.stderr
    # The end of the run warns when the answers lagged most steps, and says what to change.
    share = float(lm["fallback_steps"]) / float(lm["queries"])
    assert ("got fallback goals" in proc.stdout + proc.stderr) == (share > 0.1)


@pytest.mark.e2e
def test_kill_9_with_requests_in_flight_then_resume(train, server, tmp_path):
    received: list[tuple[float, str]] = []

    def responder(body: dict[str, Any]) -> Reply:
        received.append((time.monotonic(), json.dumps(prompt_of(body), sort_keys=True)))
        return tagged(body, SLOW)

    server.responder = responder
    args = lm_overrides(server, "NBKILL", 100000)
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path,
                            env=train_env(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline, killed_at, trained = time.monotonic() + 150, None, False
    try:  # kill it once a snapshot past frame 0 exists and a request is in flight
        while time.monotonic() < deadline and proc.poll() is None:
            if not trained:
                trained = any(snapshot_frame(p) > 0
                              for p in tmp_path.glob("exp_local/*/NBKILL_*/snapshot.pt"))
                time.sleep(0.2)
                continue
            now = time.monotonic()
            if any(now - t < SLOW / 2 for t, _ in received):
                os.kill(proc.pid, signal.SIGKILL)
                killed_at = now
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None and killed_at is None:
            proc.kill()
        proc.wait()
    assert killed_at is not None, "no snapshot with requests in flight appeared"
    # In flight, or answered by the server a moment before the kill.
    in_flight = {p for t, p in received if killed_at - t < SLOW + 0.5}
    assert in_flight
    run = find_run(tmp_path, "NBKILL")
    frame = snapshot_frame(run / "snapshot.pt")
    before = len(received)

    train(*[a for a in args if not a.startswith("num_train_frames")],
              f"num_train_frames={frame + 80}", f"snapshot_path={run}", timeout=200)
    assert int(csv_rows(run / "train.csv")[-1]["frame"]) == frame + 80
    assert_each_answer_under_its_prompt(tmp_path / "lm_cache")
    # Each process sent a prompt once; the resumed run re-sent only prompts it had no answer
    # for (the killed run's requests in flight, or prompts the first run never asked).
    first = [p for _, p in received[:before]]
    second = [p for _, p in received[before:]]
    assert len(set(first)) == len(first) and len(set(second)) == len(second)
    assert set(first) & set(second) <= in_flight


@pytest.mark.e2e
def test_a_resumed_run_does_not_spend_its_lm_budget_again(train, server, tmp_path):
    """The budget is the run's, not each process's: a run that spent it and is resumed from its
    snapshot sends no more requests, and its snapshot says what it had spent. lm.csv counts
    on across the resumption."""
    server.default = Reply.bullets("chop tree")
    args = [a for a in lm_overrides(server, "NBBUDGET", 80) if "blocking" not in a]
    args += ["env_spec.lm_spec.budget=2.5", "+env_spec.lm_spec.price=[10000,0]"]  # $1 an answer
    train(*args, timeout=200)
    run = find_run(tmp_path, "NBBUDGET")
    first = csv_rows(run / "lm.csv")[-1]
    assert float(first["budget_exhausted"]) == 1 and float(first["budget_spent"]) >= 2.5
    meta = torch.load(run / "snapshot.pt", weights_only=True)["meta"]
    assert meta["lm_spent"] == pytest.approx(float(first["budget_spent"]))
    sent = len(server.requests)

    train(*[a for a in args if not a.startswith("num_train_frames")], "num_train_frames=160",
          f"snapshot_path={run}", timeout=200)
    assert len(server.requests) == sent  # no fresh budget for the resumed process
    rows = csv_rows(run / "lm.csv")
    assert float(rows[-1]["budget_exhausted"]) == 1 and float(rows[-1]["budget_refusals"]) > 0
    # The counters count on from the first part's: the run's totals, never back to 0.
    queries = [float(r["queries"]) for r in rows]
    assert queries == sorted(queries) and queries[-1] > float(first["queries"])
    assert float(rows[-1]["api_calls"]) == float(first["api_calls"])
    assert float(rows[-1]["budget_spent"]) == pytest.approx(float(first["budget_spent"]))
    assert float(rows[-1]["budget_refusals"]) > float(first["budget_refusals"])
    assert "spent before this resumption, $0.0000 left of $2.50" in (run / "train.log").read_text()
    meta = torch.load(run / "snapshot.pt", weights_only=True)["meta"]
    assert meta["frame"] == 160 and meta["lm_spent"] == pytest.approx(float(first["budget_spent"]))


@pytest.mark.e2e
def test_the_last_row_and_snapshot_count_the_answers_in_flight_at_the_end(train, server,
                                                                          tmp_path):
    """The final evaluation lets the requests in flight end before its lm.csv row and the
    snapshot: a run resumed from it counts on from every answer the run had."""
    server.responder = lambda body: tagged(body, SLOW)
    train(*lm_overrides(server, "NBEND", 80), timeout=200)
    run = find_run(tmp_path, "NBEND")
    last = csv_rows(run / "lm.csv")[-1]
    counted = torch.load(run / "snapshot.pt", weights_only=True)["meta"]["lm_metrics"]
    assert float(last["in_flight"]) == counted["in_flight"] == 0
    assert float(last["api_calls"]) == counted["api_calls"] == len(server.requests) > 0
    assert float(last["queries"]) == counted["queries"]
