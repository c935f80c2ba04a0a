"""Policy search with an LLM as the optimiser: the buffer's maths, the parsing of proposals,
the proposer against a scripted OpenAI-compatible server (answers that improve, garbage,
failing requests) and the parameterised policies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, csv_rows, system_config
from openai_test_server import OpenAITestServer, Reply

from ellm.errors import ConfigError
from ellm.lm import build_client
from llm_in_the_loop.policy_search.parameterised_policies import (
    CrafterForagerTask,
    Forager,
    GymLinearTask,
    read_view,
)
from llm_in_the_loop.policy_search.parameters import ParameterBuffer, ParameterSpace
from llm_in_the_loop.policy_search.proposers import (
    EXAMPLE,
    REASK,
    LLMProposer,
    RandomProposer,
    parse_proposal,
)
from llm_in_the_loop.policy_search.run import PolicySearchRun, validate
from llm_in_the_loop.policy_search.tutorial_prompt import TutorialPrompt, check_template
from lmclient.pricing import resolve_price

SPACE = ParameterSpace(("w0", "w1"), -6.0, 6.0, decimals=2)

pytestmark = pytest.mark.usefixtures("no_real_keys")


def proposer(server: OpenAITestServer, tmp_path: Path, tutorial: TutorialPrompt | None = None,
             reasks: int = 0, **kw: Any) -> LLMProposer:
    spec = {"lm": "test-model", "base_url": server.base_url, "timeout": 2.0, "max_retries": 1,
            "backoff": 0.0, "max_backoff": 0.01, "temperature": 1.0, "max_tokens": 60, **kw}
    client = build_client(spec, cache_dir=tmp_path / "cache", sleep=lambda s: None)
    return LLMProposer(client, SPACE, np.random.default_rng(0), task="Drive the car.",
                       step=1.0, prompt_entries=4, iterations=10, tutorial=tutorial,
                       reasks=reasks)


# ---- the space and the buffer ---------------------------------------------------------------
def test_space_samples_in_range_rounded_and_clips():
    rng = np.random.default_rng(3)
    samples = np.array([SPACE.sample(rng) for _ in range(200)])
    assert samples.min() >= -6 and samples.max() <= 6
    assert np.allclose(samples, np.round(samples, 2))
    values, outside = SPACE.clip([1.234, -2.0])
    assert list(values) == pytest.approx([1.23, -2.0]) and not outside
    values, outside = SPACE.clip([7.5, -9.0])
    assert list(values) == [6.0, -6.0] and outside
    assert SPACE.format([1.5, -0.25]) == "w0=1.50, w1=-0.25"
    with pytest.raises(ValueError, match="empty"):
        ParameterSpace(("a",), 1.0, 1.0)
    with pytest.raises(ValueError, match="distinct"):
        ParameterSpace(("a", "a"), 0.0, 1.0)


def test_buffer_best_shown_and_rendered():
    buffer = ParameterBuffer(SPACE)
    assert buffer.best is None
    returns = [5.0, -1.0, 9.0, 9.0, 0.0, 2.0, 1.0]
    for k, ret in enumerate(returns):
        buffer.add([k, -k], ret)
    best = buffer.best
    assert (best.ret, best.order) == (9.0, 2)  # the earliest of a tie
    # All fit: every entry, lowest return first, older first on a tie.
    assert [e.order for e in buffer.shown(10)] == [1, 4, 6, 5, 0, 2, 3]
    # Four of seven: the two best (orders 2, 3) and the two most recent others (6, 5).
    assert [e.order for e in buffer.shown(4)] == [6, 5, 2, 3]
    # Five: the three best (2, 3, 0) and the two most recent others.
    assert [e.order for e in buffer.shown(5)] == [6, 5, 0, 2, 3]
    # Two: the best and the most recent.
    assert buffer.render(2).splitlines() == ["w0=6.00, w1=-6.00 -> return 1.00",
                                             "w0=2.00, w1=-2.00 -> return 9.00"]
    with pytest.raises(ValueError, match="expected 2 parameters"):
        buffer.add([1.0], 0.0)
    with pytest.raises(ValueError, match="limit"):
        buffer.shown(0)


# ---- parsing --------------------------------------------------------------------------------
@pytest.mark.parametrize(("answer", "values", "status"), [
    ("w0=1.5, w1=-0.25", [1.5, -0.25], "ok"),
    ("w0: 2, w1: 3.", [2.0, 3.0], "ok"),
    ("Next I try w1 = -1e-1 and w0 = +.5 because ...", [0.5, -0.1], "ok"),
    ("[1.5, -2]", [1.5, -2.0], "ok"),
    ("Setting:\n  3.25, 4.5\nreason: 1 2 3", [3.25, 4.5], "ok"),
    ("w0=9.5, w1=1", [9.5, 1.0], "ok"),               # out of range: the proposer clips
    ("w0=1, w1=nan", None, "unparsable"),
    ("w0=1, w1=1e999", None, "unparsable"),           # inf once read
    ("w0=2e9, w1=1", None, "unparsable"),              # past MAX_MAGNITUDE
    ("w0=1", None, "unparsable"),                      # one value: no line of exactly two
    ("I would increase both weights.", None, "unparsable"),
    ("1, 2, 3", None, "unparsable"),
    ("", None, "unparsable"),
])
def test_parse_proposal(answer, values, status):
    parsed, got = parse_proposal(answer, SPACE)
    assert got == status
    assert parsed == (pytest.approx(values) if values else None)


def test_named_values_ignore_longer_names():
    space = ParameterSpace(("w1", "w10"), 0.0, 20.0)
    assert parse_proposal("w10=5, w1=2", space) == ([2.0, 5.0], "ok")


# ---- the proposers against a scripted server ------------------------------------------------
def test_llm_proposals_improve_are_clipped_and_counted(server, tmp_path):
    server.push(Reply("w0=0.5, w1=4.0"), Reply("w0=-0.2, w1=5.5\nbecause..."),
                Reply("w0=12, w1=5"))
    p = proposer(server, tmp_path)
    buffer = ParameterBuffer(SPACE)
    buffer.add([1.0, 1.0], -20.0)
    first = p.propose(buffer, 1)
    assert (first.params, first.status) == ((0.5, 4.0), "ok")
    buffer.add(first.params, 60.0)
    second = p.propose(buffer, 2)
    assert (second.params, second.status) == ((-0.2, 5.5), "ok")
    buffer.add(second.params, 90.0)
    third = p.propose(buffer, 3)
    assert (third.params, third.status, third.fallback) == ((6.0, 5.0), "clipped", False)
    assert p.counts == {"ok": 2, "clipped": 1}
    # The last prompt shows the buffer, best last, and asks in the required form.
    text = server.requests[-1].body["messages"][1]["content"]
    assert text.index("return -20.00") < text.index("return 60.00") < text.index("return 90.00")
    assert "proposal 3 of 10" in text and "w0=<number>, w1=<number>" in text
    assert server.requests[-1].body["messages"][0]["role"] == "system"
    assert "another task" not in text  # the worked example is for base models only
    m = p.client.metrics()
    assert (m["api_calls"], m["parse_errors"], m["completion_tokens"]) == (3, 0, 30)


def test_garbage_and_failing_answers_fall_back_to_random_settings(server, tmp_path):
    server.push(Reply("I cannot help with that."), Reply.garbage(),
                Reply.error(500), Reply.error(500))
    p = proposer(server, tmp_path)
    buffer = ParameterBuffer(SPACE)
    garbage = p.propose(buffer, 1)
    assert garbage.status == "unparsable" and garbage.fallback
    assert garbage.answer == "I cannot help with that."
    broken = p.propose(buffer, 2)   # an HTML page instead of JSON: no answer (an API error)
    assert broken.status == "no_answer" and broken.fallback and broken.answer is None
    failed = p.propose(buffer, 3)   # HTTP 500 twice (one retry): no answer
    assert failed.status == "no_answer" and failed.fallback and failed.answer is None
    for proposal in (garbage, broken, failed):
        assert all(-6 <= v <= 6 for v in proposal.params)
    assert p.counts == {"unparsable": 1, "no_answer": 2}
    m = p.client.metrics()
    assert (m["parse_errors"], m["api_errors"]) == (1, 2)


def test_completions_prompt_and_the_cache(server, tmp_path):
    p = proposer(server, tmp_path, endpoint="completions")
    server.default = Reply("w0=1, w1=2")
    buffer = ParameterBuffer(SPACE)
    assert p.propose(buffer, 1).params == (1.0, 2.0)
    prompt = server.requests[0].body["prompt"]
    # A base model reads a worked example of another task first, then this task's text.
    assert prompt.startswith(EXAMPLE) and prompt.endswith("Setting:")
    assert prompt.index("Setting: a=3.00, b=-1.50") < prompt.index("Drive the car.")
    assert prompt[len(EXAMPLE):] == p.prompt_text(buffer, 1) + "\nSetting:"
    assert "(none yet)" in prompt
    p.propose(buffer, 1)  # the same prompt: answered from the cache
    assert p.client.metrics()["cache_hits"] == 1 and len(server.requests) == 1


def test_random_proposer_is_seeded():
    a = RandomProposer(SPACE, np.random.default_rng(5)).propose(ParameterBuffer(SPACE), 1)
    b = RandomProposer(SPACE, np.random.default_rng(5)).propose(ParameterBuffer(SPACE), 1)
    assert a == b and a.status == "random"


# ---- the policies ---------------------------------------------------------------------------
def test_linear_policies_play_gymnasium_tasks():
    car = GymLinearTask("MountainCarContinuous-v0", -6, 6, 2)
    good = car.episode([0.0, 5.0], seed=0)
    assert good.success and good.ret > 90
    assert car.episode([0.0, 5.0], seed=0) == good  # the seed fixes the world
    assert not car.episode([0.0, 0.0], seed=0).success
    pole = GymLinearTask("CartPole-v1", -6, 6, 2, max_episode_steps=100)
    assert pole.episode([0, 0, 0, 0, 0], seed=0).ret < 20
    balanced = pole.episode([0, 0, 1, 1, 0], seed=0)
    assert balanced.ret == 100 and balanced.success  # the step limit reached
    with pytest.raises(ValueError, match="no linear policy"):
        GymLinearTask("Pendulum-v1", -1, 1, 2)


def test_forager_reads_the_text_observation():
    view = read_view("You see tree and water. You are targeting tree. Nearest: tree 1 step left;"
                     " crafting table 2 steps right and 1 step up; water here. Inventory: 3 "
                     "wood, 1 sapling. Vitals: health 9/9, food 8/9, drink 5/9, energy 9/9. "
                     "Achievements so far: none. Steps left: 90.")
    assert view.nearest == {"tree": (-1, 0), "table": (2, -1), "water": (0, 0)}
    assert view.facing == "tree"
    assert view.inventory == {"wood": 3, "sapling": 1, "health": 9, "food": 8, "drink": 5,
                              "energy": 9}


def test_forager_decisions():
    rng = np.random.default_rng(0)
    text = ("You see tree. You are targeting {facing}. Nearest: {near}. Inventory: {inv}. "
            "Vitals: health 9/9, food 9/9, drink 9/9, energy 9/9.")

    def act(params, facing="grass", near="tree 2 steps left", inv="empty"):
        return Forager(params, rng, table_cost=2).act(text.format(facing=facing, near=near,
                                                                  inv=inv))

    assert act([5, 0, 0, 3, 5]) == "move left"
    assert act([5, 0, 0, 3, 5], facing="tree") == "chop tree"
    assert act([0, 0, 0, 3, 10], facing="tree") == "move left"  # no pull: explore (heading)
    assert act([5, 0, 0, 3, 5], inv="3 wood") == "place crafting table"
    assert act([5, 0, 0, 3, 5], inv="2 wood") == "move left"  # wants 3 before the table
    assert act([5, 0, 0, 1, 5], inv="2 wood") == "place crafting table"  # at least its cost
    assert act([5, 0, 0, 3, 5], near="crafting table 1 step up", inv="1 wood") == \
        "make wood pickaxe"
    assert act([5, 0, 0, 3, 5], near="crafting table 3 steps down", inv="1 wood") == \
        "move down"


def test_forager_task_returns_progress_and_speed():
    task = CrafterForagerTask("make wood pickaxe", length=150, version=2, decimals=2)
    good = task.episode([8, 0, 0, 3, 8], seed=0)
    assert good.success and 3 < good.ret < 4
    assert good.ret == pytest.approx(3 + 1 - good.steps / 150)
    idle = task.episode([0, 0, 0, 10, 0], seed=0)
    assert not idle.success and idle.ret < 3


@pytest.mark.parametrize("name", ["policy_search", "code_policy", "llf"])
def test_every_config_key_is_documented_where_it_is_defined(name):
    lines = (ROOT / "llm_in_the_loop" / name / "conf" / f"{name}.yaml").read_text()
    lines = lines.splitlines()
    body = lines[:next(i for i, line in enumerate(lines) if line.startswith("hydra:"))]
    keys = [line for line in body if line.strip() and not line.lstrip().startswith("#")]
    assert keys and all(" # " in line or line.endswith(":") for line in keys), [
        line for line in keys if " # " not in line and not line.endswith(":")]


# ---- ProPS as its tutorial runs it ----------------------------------------------------------
def test_mountaincar_pays_fuel_on_the_unclipped_force_as_the_tutorial():
    # The tutorial's weights and return for the world of seed 0: gymnasium moves the car with
    # the force clipped to [-1, 1] but charges fuel on the force given.
    car = GymLinearTask("MountainCarContinuous-v0", -7, 7, 2)
    assert car.episode([-4.27, 5.38], seed=0).ret == pytest.approx(-275.78, abs=0.005)
    clipped = GymLinearTask("MountainCarContinuous-v0", -7, 7, 2, clip_action=True)
    assert clipped.episode([-4.27, 5.38], seed=0).ret == pytest.approx(-74.15, abs=0.005)
    # The tutorial plays 1000 steps, gymnasium 999: one more step of fuel on a failed episode.
    long = GymLinearTask("MountainCarContinuous-v0", -7, 7, 2, max_episode_steps=1000)
    assert car.episode([-4.27, 5.38], seed=4).ret == pytest.approx(-198.01, abs=0.005)
    assert long.episode([-4.27, 5.38], seed=4).ret == pytest.approx(-198.27, abs=0.005)
    with pytest.raises(ValueError, match="clip_action is for MountainCarContinuous-v0"):
        GymLinearTask("CartPole-v1", -6, 6, 2, clip_action=True)


@pytest.mark.parametrize(("answer", "aliases", "values"), [
    ("a: -4.27, b: 5.38\nThe best so far lies near there.", ("a", "b"), [-4.27, 5.38]),
    ("a: -4.27; b: 5.38; f(a,b): -275.78", ("a", "b"), [-4.27, 5.38]),  # a history line
    ("params[0]: -4.27, params[1]: 5.38", (), [-4.27, 5.38]),
    ("params[0]: -4.27; params[1]: 5.38; f(params): -275.78", (), [-4.27, 5.38]),
    ("b: 2, a: 1", ("a", "b"), [1.0, 2.0]),
])
def test_parse_the_tutorials_formats(answer, aliases, values):
    assert parse_proposal(answer, SPACE, aliases) == (pytest.approx(values), "ok")


def test_the_tutorials_prompt_and_a_template_of_ones_own(tmp_path):
    buffer = ParameterBuffer(SPACE)
    buffer.add([-4.27, 5.38], -275.78)
    buffer.add([0.5, 3.0], 12.5)
    buffer.add([1.0, 2.0], 3.0)
    ours = TutorialPrompt(SPACE, step=1.0, iterations=400, entries=2)
    text = ours.text(buffer, 1)
    # The two most recent settings, in the order tried, as the tutorial's history lines.
    assert "a: 0.5; b: 3; f(a,b): 12.50\na: 1; b: 2; f(a,b): 3.00\n" in text
    assert "-275.78" not in text
    assert "This is iteration 0." in text and "'a: , b:'" in text
    assert "steps of about 1" in text and "between -6 and 6" in text
    own = TutorialPrompt(SPACE, 1.0, 400, 10, "Max {{step_number}} of {{ iterations }}, "
                         "step {{ search_std }}:\n{{ episode_reward_buffer_string }}")
    assert own.text(buffer, 3) == ("Max 2 of 400, step 1:\na: -4.27; b: 5.38; f(a,b): -275.78\n"
                                   "a: 0.5; b: 3; f(a,b): 12.50\na: 1; b: 2; f(a,b): 3.00\n")
    with pytest.raises(ValueError, match=r"unknown placeholder\(s\) \['budget'\]"):
        check_template("{{ budget }} {{ episode_reward_buffer_string }}")
    with pytest.raises(ValueError, match="would not show the settings tried"):
        check_template("iteration {{ step_number }}")


def test_unparsable_answers_are_asked_again_then_fall_back(server, tmp_path):
    server.push(Reply("I would go higher."), Reply("a: -4.3, b: 5.4\nNear the best."),
                Reply("no"), Reply("still no"), Reply("never"))
    p = proposer(server, tmp_path, tutorial=TutorialPrompt(SPACE, 1.0, 10, 40), reasks=2)
    buffer = ParameterBuffer(SPACE)
    buffer.add([1.0, 1.0], -20.0)
    first = p.propose(buffer, 1)
    assert (first.params, first.status, first.reasks) == ((-4.3, 5.4), "ok", 1)
    # The tutorial's prompt is one user message; the re-ask shows the answer and the form.
    messages = server.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert "a: 1; b: 1; f(a,b): -20.00" in messages[0]["content"]
    assert messages[1]["content"] == "I would go higher."
    assert messages[2]["content"] == REASK.format(form="a: <number>, b: <number>")
    # Two re-asks, three unusable answers: a random setting, counted.
    last = p.propose(buffer, 2)
    assert (last.status, last.reasks, last.answer) == ("unparsable", 2, "never")
    assert all(-6 <= v <= 6 for v in last.params)
    assert p.counts == {"ok": 1, "unparsable": 1}
    m = p.client.metrics()
    assert (m["api_calls"], m["parse_errors"]) == (5, 4)


def test_warmup_draws_from_its_own_range():
    wide = ParameterSpace(("w0", "w1"), -7.0, 7.0, decimals=1)
    narrow = ParameterSpace(("w0", "w1"), -3.0, 3.0, decimals=1)
    p = RandomProposer(wide, np.random.default_rng(0), warmup=narrow)
    warm = np.array([p.draw("warmup").params for _ in range(200)])
    search = np.array([p.draw("random").params for _ in range(200)])
    assert np.abs(warm).max() <= 3 and np.abs(search).max() > 3


def test_a_run_as_the_tutorial_counts_its_reasks(server, tmp_path):
    server.push(Reply("no idea"), Reply("a: 6.5, b: 5.38"), Reply("a: -1, b: 2\nwhy"))
    cfg = system_config(
        "policy_search", tmp_path, "iterations=2", "warmup_episodes=3", "num_eval_episodes=1",
        "eval_every=0", "param_range=[-7,7]", "warmup_range=[-3,3]", "prompt_style=tutorial",
        "reasks=1", "env_spec.max_episode_steps=20", "env_spec.lm_spec.lm=test-model",
        f"env_spec.lm_spec.base_url={server.base_url}")
    run = PolicySearchRun(cfg, tmp_path / "run")
    run.run()
    rows = csv_rows(tmp_path / "run" / "iteration.csv")
    assert [float(r["reasks"]) for r in rows] == [0, 0, 0, 1, 0]
    assert all(abs(float(r[f"param_{n}"])) <= 3 for r in rows[:3] for n in ("w0", "w1"))
    assert [(float(r["param_w0"]), float(r["param_w1"])) for r in rows[3:]] == [
        (6.5, 5.38), (-1.0, 2.0)]
    best = json.loads((tmp_path / "run" / "best.json").read_text())
    assert best["reasks"] == 1 and best["counts"] == {"warmup": 3, "ok": 2}
    assert "a: 6.5; b: 5.38; f(a,b): " in server.requests[-1].body["messages"][0]["content"]


def test_each_proposal_evaluated_and_played_as_the_tutorial(server, tmp_path):
    # The same two answers, the first out of range, in a run as the tutorial evaluates and
    # plays them, then in a default run.
    server.push(Reply("a: 8.5, b: 5.38"), Reply("a: -1, b: 2\nwhy"),
                Reply("a: 8.5, b: 5.38"), Reply("a: -1, b: 2\nwhy"))
    common = ["iterations=2", "warmup_episodes=2", "num_eval_episodes=3", "eval_every=0",
              "param_range=[-7,7]", "prompt_style=tutorial", "env_spec.max_episode_steps=20",
              "env_spec.lm_spec.lm=test-model", f"env_spec.lm_spec.base_url={server.base_url}"]
    PolicySearchRun(system_config("policy_search", tmp_path / "a", *common,
                                  "eval_each_proposal=true", "clip_proposals=false"),
                    tmp_path / "tutorial").run()
    history = server.requests[1].body["messages"][0]["content"]
    PolicySearchRun(system_config("policy_search", tmp_path / "b", *common),
                    tmp_path / "ours").run()
    car = GymLinearTask("MountainCarContinuous-v0", -7, 7, 2, max_episode_steps=20)
    # Computed apart from the run: training episode k plays world 10^6 + k (seed 1), evaluation
    # episode j world 10^6 + 500000 + j, the same three for every proposal.
    rows = csv_rows(tmp_path / "tutorial" / "iteration.csv")
    for k, (row, params) in enumerate(zip(rows[2:], [(8.5, 5.38), (-1.0, 2.0)]), start=2):
        assert (float(row["param_w0"]), float(row["param_w1"])) == params  # 8.5: as given
        evaluated = [car.episode(params, 1_500_000 + j).ret for j in range(3)]
        assert float(row["eval_return"]) == pytest.approx(np.mean(evaluated))
        assert float(row["eval_return_std"]) == pytest.approx(np.std(evaluated))
        assert float(row["return"]) == pytest.approx(car.episode(params, 1_000_000 + k).ret)
    assert len(set(evaluated)) == 3  # the evaluation worlds differ
    assert [r["eval_return"] for r in rows[:2]] == ["", ""]  # the warm-up is not evaluated
    assert [float(r["out_of_range"]) for r in rows] == [0, 0, 1, 0]
    # The history shows the training return, as the tutorial's (its evaluation is not recorded).
    assert f"a: 8.5; b: 5.38; f(a,b): {float(rows[2]['return']):.2f}\n" in history
    assert float(rows[2]["return"]) != pytest.approx(float(rows[2]["eval_return"]))
    best = json.loads((tmp_path / "tutorial" / "best.json").read_text())
    assert best["counts"] == {"warmup": 2, "out_of_range": 1, "ok": 1}
    # The default: the answer clipped into range, no evaluation of each proposal.
    rows = csv_rows(tmp_path / "ours" / "iteration.csv")
    assert (float(rows[2]["param_w0"]), float(rows[2]["clipped"])) == (7.0, 1.0)
    assert "eval_return" not in rows[0]
    for run in ("tutorial", "ours"):  # the best setting's evaluation at the end, in both
        assert len(csv_rows(tmp_path / run / "eval.csv")) == 1


def test_an_answer_that_rounds_to_no_finite_number_fails_and_the_json_stays_strict(
        server, tmp_path):
    # Played as given, 1e308 rounded to 2 decimals was inf: it was played, and best.json and
    # proposals.jsonl held Infinity and NaN (invalid JSON).
    server.push(Reply("a: 1e308, b: 1"), Reply("a: 8.5, b: 5.38"))
    cfg = system_config(
        "policy_search", tmp_path, "iterations=2", "warmup_episodes=1", "num_eval_episodes=1",
        "eval_every=0", "param_range=[-7,7]", "prompt_style=tutorial", "clip_proposals=false",
        "reasks=0",
        "env_spec.max_episode_steps=20", "env_spec.lm_spec.lm=test-model",
        f"env_spec.lm_spec.base_url={server.base_url}")
    PolicySearchRun(cfg, tmp_path / "run").run()

    def strict(text: str) -> Any:
        return json.loads(text, parse_constant=lambda word: pytest.fail(f"{word} in JSON"))

    lines = (tmp_path / "run" / "proposals.jsonl").read_text().splitlines()
    proposals = [strict(line) for line in lines]
    assert [p["status"] for p in proposals] == ["warmup", "unparsable", "out_of_range"]
    assert all(abs(v) <= 7 for v in proposals[1]["params"])  # a random draw instead
    assert proposals[2]["params"] == [8.5, 5.38]
    best = strict((tmp_path / "run" / "best.json").read_text())
    assert best["counts"] == {"warmup": 1, "unparsable": 1, "out_of_range": 1}
    # The check after rounding: a value that rounds to inf is refused when played as given.
    assert SPACE.settle([1e308, 1.0], clip=False) == (None, "unparsable")
    assert SPACE.settle([1e308, 1.0], clip=True)[1] == "clipped"


@pytest.mark.parametrize(("overrides", "message"), [
    (["param_range=[-7,7]", "warmup_range=[-3,8]"],
     r"warmup_range \[-3, 8\] must lie within the search range \[-7, 7\]"),
    (["warmup_range=[3,-3]"], "warmup_range=.* is invalid"),
    (["prompt_template=x.txt"], "prompt_template is the template of prompt_style=tutorial"),
    (["env_spec.name=CartPole-v1", "env_spec.clip_action=true"],
     "env_spec.clip_action is for MountainCarContinuous-v0"),
    (["reasks=-1"], "reasks=-1 is invalid"),
    (["prompt_style=props"], "prompt_style='props' is invalid: expected one of ours, tutorial"),
    (["eval_each_proposal=maybe"], "eval_each_proposal='maybe' is invalid"),
    (["eval_each_proposal=true", "num_eval_episodes=0"],
     "eval_each_proposal=true plays each proposal on num_eval_episodes"),
    (["clip_proposals=sometimes"], "clip_proposals='sometimes' is invalid"),
])
def test_search_options_are_checked_by_name(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(system_config("policy_search", tmp_path, *overrides))


def test_an_unusable_template_file_is_refused_by_name(tmp_path):
    template = tmp_path / "t.txt"
    template.write_text("Iteration {{ step_number }} of {{ horizon }}")
    cfg = system_config("policy_search", tmp_path, "prompt_style=tutorial",
                        f"prompt_template={template}")
    with pytest.raises(ConfigError, match=r"prompt_template .*t.txt.*unknown placeholder"):
        PolicySearchRun(cfg, tmp_path / "run")


# ---- the tutorial's models ------------------------------------------------------------------
def test_the_tutorials_models_have_prices_and_unknown_ones_do_not():
    assert resolve_price("o3-mini", None) == (1.10, 4.40)
    assert resolve_price("o3-mini-2025-01-31", None) == (1.10, 4.40)
    assert resolve_price("o1-preview", None) == (15.0, 60.0)
    with pytest.raises(ValueError, match="no price known for model 'o9-ultra'"):
        resolve_price("o9-ultra", None)
    assert resolve_price("o9-ultra", None, (2.0, 8.0)) == (2.0, 8.0)


def reasoning_client(server: OpenAITestServer, tmp_path: Path, model: str, **kw: Any) -> Any:
    server.models = [model]
    spec = {"lm": model, "base_url": server.base_url, "max_tokens": 2000, "stop": "\n\n",
            "temperature": 1.0, **kw}
    return build_client(spec, cache_dir=tmp_path / "cache", sleep=lambda s: None)


def test_reasoning_models_get_the_fields_they_take(server, tmp_path):
    server.default = Reply("a: 1, b: 2")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go."}]
    assert reasoning_client(server, tmp_path, "o3-mini").complete(messages) == "a: 1, b: 2"
    body = server.requests[-1].body
    assert body["max_completion_tokens"] == 2000
    assert not {"max_tokens", "temperature", "stop"} & set(body)
    assert body["messages"][0]["role"] == "system"
    reasoning_client(server, tmp_path, "o1-preview").complete(messages)
    # o1-preview refuses a system message: it is sent as a user message.
    assert [m["role"] for m in server.requests[-1].body["messages"]] == ["user", "user"]
    reasoning_client(server, tmp_path, "gpt-4o-mini").complete(messages)
    body = server.requests[-1].body
    assert (body["max_tokens"], body["temperature"], body["stop"]) == (2000, 1.0, ["\n\n"])
    assert "max_completion_tokens" not in body
    with pytest.raises(ValueError, match="samples at temperature 1 only"):
        reasoning_client(server, tmp_path, "o3-mini", temperature=0.0)
