"""The LLM-as-policy agent against a scripted OpenAI-compatible server, and the references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from openai_test_server import OpenAITestServer, Reply

import text_crafter
from ellm.lm import build_client
from llm_in_the_loop.llf.policies import LLMPolicy, RandomPolicy, ScriptedPolicy, parse_action
from text_game.llf import NO_OP

ACTIONS = ("do nothing", "move left", "chop tree", "place stone", "place crafting table")

pytestmark = pytest.mark.usefixtures("no_real_keys")


def policy(server: OpenAITestServer, tmp_path: Path, history: int = 4, **kw: Any) -> LLMPolicy:
    spec = {"lm": "test-model", "base_url": server.base_url, "timeout": 2.0, "max_retries": 1,
            "backoff": 0.0, "max_backoff": 0.01, "temperature": 0, "max_tokens": 16,
            "stop": "\n", **kw}
    agent = LLMPolicy(build_client(spec, cache_dir=tmp_path / "cache", sleep=lambda s: None),
                      history=history)
    agent.reset({"instruction": "Chop a tree.", "observation": "o0", "feedback": None}, ACTIONS)
    return agent


def obs(observation: str, feedback: str | None = None) -> dict[str, Any]:
    return {"observation": observation, "instruction": None, "feedback": feedback}


@pytest.mark.parametrize(("answer", "action"), [
    ("chop tree", "chop tree"),
    ("- Chop Tree.", "chop tree"),
    ("Action: move left\nbecause a tree is there", "move left"),
    ('1. "place crafting table"', "place crafting table"),
    ("I would chop tree, then place stone.", "chop tree"),
    ("\n\n  place stone  ", "place stone"),
    ("fly to the moon", None),
    ("", None),
    ("chop trees", None),
])
def test_parse_action(answer, action):
    assert parse_action(answer, ACTIONS) == action


def test_good_answers_are_played_and_the_prompt_carries_the_last_turns(server, tmp_path):
    server.push(Reply("move left"), Reply("chop tree"), Reply("Action: place stone"))
    agent = policy(server, tmp_path, history=1, endpoint="completions")
    assert agent.act(obs("o1")) == "move left"
    assert agent.act(obs("o2", "You moved.")) == "chop tree"
    assert agent.act(obs("o3", "You got 1 wood.")) == "place stone"
    prompts = [r.body["prompt"] for r in server.requests]
    assert prompts[0] == "Chop a tree.\n\nObservation: o1\nAction:"
    assert prompts[1] == ("Chop a tree.\n\nObservation: o1\nAction: move left\n"
                          "Feedback: You moved.\n\nObservation: o2\nAction:")
    # history=1: only the last turn
    assert prompts[2] == ("Chop a tree.\n\nObservation: o2\nAction: chop tree\n"
                          "Feedback: You got 1 wood.\n\nObservation: o3\nAction:")
    assert server.requests[0].body["stop"] in ("\n", ["\n"])
    metrics = agent.metrics()
    assert metrics["api_calls"] == 3 and metrics["parse_errors"] == 0
    assert metrics["fallbacks"] == 0 and metrics["prompt_tokens"] == 300


def test_an_empty_feedback_adds_no_feedback_line(server, tmp_path):
    # After a step with nothing to say the envs give '' (LLF-Bench's empty feedback).
    server.push(Reply("move left"), Reply("chop tree"))
    agent = policy(server, tmp_path, endpoint="completions")
    agent.act(obs("o1"))
    agent.act(obs("o2", ""))
    assert server.requests[1].body["prompt"] == ("Chop a tree.\n\nObservation: o1\nAction: "
                                                 "move left\n\nObservation: o2\nAction:")


def test_chat_prompt_and_the_cache(server, tmp_path):
    server.default = Reply("chop tree")
    agent = policy(server, tmp_path, history=0)
    assert agent.act(obs("o1")) == "chop tree"
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"].endswith("Observation: o1\nAction:")
    agent = policy(server, tmp_path, history=0)  # a new run with the same cache
    assert agent.act(obs("o1")) == "chop tree"
    assert len(server.requests) == 1 and agent.metrics()["cache_hits"] == 1


def test_garbage_is_counted_and_falls_back_to_the_no_op(server, tmp_path):
    server.push(Reply("I like turtles."), Reply(""), Reply("chop tree"))
    agent = policy(server, tmp_path)
    assert [agent.act(obs(f"o{i}")) for i in range(3)] == [NO_OP, NO_OP, "chop tree"]
    metrics = agent.metrics()
    assert metrics["parse_errors"] == 2 and metrics["fallbacks"] == 2
    assert metrics["api_errors"] == 0


def test_errors_fall_back_to_the_no_op_and_the_run_goes_on(server, tmp_path):
    server.push(Reply.error(500), Reply.error(503), Reply.error(400), Reply("move left"))
    agent = policy(server, tmp_path)
    assert agent.act(obs("o1")) == NO_OP  # 500, retried once, 503: gives up
    assert agent.act(obs("o2")) == NO_OP  # 400: not retried
    assert agent.act(obs("o3")) == "move left"
    metrics = agent.metrics()
    assert metrics["api_errors"] == 2 and metrics["retries"] == 1
    assert metrics["fallbacks"] == 2 and metrics["parse_errors"] == 0


def test_a_spent_budget_falls_back_without_calling(server, tmp_path):
    server.default = Reply("chop tree", prompt_tokens=1000, completion_tokens=0)
    agent = policy(server, tmp_path, budget=0.001, price=[1.0, 1.0])
    assert agent.act(obs("o1")) == "chop tree"  # $0.001 spent
    assert agent.act(obs("o2")) == NO_OP
    assert len(server.requests) == 1 and agent.metrics()["budget_refusals"] == 1


def test_the_scripted_policy_follows_fp_and_asks_the_oracle_otherwise():
    env = gym.make(text_crafter.LLF_ENV_ID, task="make wood pickaxe", feedback_type="fp")
    first, _ = env.reset(seed=3)
    agent = ScriptedPolicy()
    agent.reset(first, env.unwrapped.actions)
    assert agent.act(obs("You see tree. You are targeting tree. Inventory: empty.")) == "chop tree"
    assert agent.act(obs("o", 'Next step: "chop tree"; a tree is 4 steps left: "move left".')) \
        == "move left"
    o = first
    for _ in range(100):
        o, _, terminated, truncated, info = env.step(agent.act(o))
        if terminated or truncated:
            break
    # Fallbacks: the first hand-made observation and the episode's first step (no feedback).
    assert info["success"] and agent.metrics()["fallbacks"] == 2


def test_the_random_policy_plays_valid_actions():
    agent = RandomPolicy(seed=0)
    agent.reset(obs("o"), ACTIONS)
    assert {agent.act(obs("o")) for _ in range(50)} == set(ACTIONS)
