"""Policy search with an LLM as the optimiser: the buffer's maths, the parsing of proposals,
the proposer against a scripted OpenAI-compatible server (answers that improve, garbage,
failing requests) and the parameterised policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai_test_server import OpenAITestServer, Reply

from ellm.lm import build_client
from llm_in_the_loop.policy_search import (
    EXAMPLE,
    LLMProposer,
    ParameterBuffer,
    ParameterSpace,
    RandomProposer,
    parse_proposal,
)
from llm_in_the_loop.search_policies import CrafterForagerTask, Forager, GymLinearTask, read_view

SPACE = ParameterSpace(("w0", "w1"), -6.0, 6.0, decimals=2)

pytestmark = pytest.mark.usefixtures("no_real_keys")


def proposer(server: OpenAITestServer, tmp_path: Path, **kw: Any) -> LLMProposer:
    spec = {"lm": "test-model", "base_url": server.base_url, "timeout": 2.0, "max_retries": 1,
            "backoff": 0.0, "max_backoff": 0.01, "temperature": 1.0, "max_tokens": 60, **kw}
    client = build_client(spec, cache_dir=tmp_path / "cache", sleep=lambda s: None)
    return LLMProposer(client, SPACE, np.random.default_rng(0), task="Drive the car.",
                       step=1.0, prompt_entries=4, iterations=10)


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


@pytest.mark.parametrize("name", ["policy_search.yaml", "code_policy.yaml", "llf.yaml"])
def test_every_config_key_is_documented_where_it_is_defined(name):
    lines = (Path(__file__).resolve().parents[1] / "llm_in_the_loop" / name).read_text().splitlines()
    body = lines[:next(i for i, line in enumerate(lines) if line.startswith("hydra:"))]
    keys = [line for line in body if line.strip() and not line.lstrip().startswith("#")]
    assert keys and all(" # " in line or line.endswith(":") for line in keys), [
        line for line in keys if " # " not in line and not line.endswith(":")]
