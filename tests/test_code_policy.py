"""Code as policy: the Meta-World feedback task, the rollout feedback, and OptoPrime's calls
through the project's LM client against a scripted server (code that improves, garbage answers,
code that raises or hangs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import csv_rows, system_config
from openai_test_server import OpenAITestServer, Reply

from ellm.lm import build_client
from llm_in_the_loop.code_policy.sandbox import Sandbox
from llm_in_the_loop.code_policy.targets import (
    METAWORLD_CODE,
    CrafterTarget,
    EpisodeRecord,
    MetaWorldTarget,
    StepRecord,
    _target,
    feedback_text,
    sandboxed,
)

pytest.importorskip("metaworld", reason="needs the optim extra: pip install -e '.[optim]'")

# A controller that follows the expert's plan: above the puck, down, grasp, to the goal.
GOOD_CODE = '''def controller(obs):
    hand, puck, goal = obs["hand_pos"], obs["puck_pos"], obs["goal_pos"]
    dx, dy = hand[0] - puck[0], hand[1] - puck[1]
    if (dx * dx + dy * dy) ** 0.5 > 0.02:
        return [puck[0], puck[1], puck[2] + 0.1, -1.0]
    if hand[2] - puck[2] > 0.05 and puck[2] < 0.04:
        return [puck[0], puck[1], puck[2] + 0.03, -1.0]
    if obs["gripper_distance_apart"] > 0.73:
        return hand + [1.0]
    return goal + [1.0]
'''
RAISING_CODE = "def controller(obs):\n    return obs['velocity'] + [1.0]\n"
HANGING_CODE = "def controller(obs):\n    while True:\n        pass\n"

pytestmark = pytest.mark.usefixtures("no_real_keys")


def suggestion(code: str, name: str) -> Reply:
    """OptoPrime's answer format; ``name``: the code node's name in the prompt (``__code0``,
    numbered per process)."""
    return Reply(json.dumps({"reasoning": "Follow the expert.", "suggestion": {name: code}}))


@pytest.fixture(scope="module")
def metaworld() -> Iterator[MetaWorldTarget]:
    target = MetaWorldTarget(horizon=12, substeps=10, seed=0)
    yield target
    target.close()


# ---- the task and its feedback --------------------------------------------------------------
def test_expert_solves_pick_place_and_random_does_not(metaworld):
    expert = metaworld.rollout(metaworld.expert(), seed=3)
    assert expert.success and len(expert.steps) <= 10 and expert.error is None
    assert "the puck is at the goal" in expert.steps[-1].feedback
    first = expert.steps[0]
    assert set(first.observation) == {"hand_pos", "gripper_distance_apart", "puck_pos",
                                      "puck_rot", "goal_pos"}
    assert "good: the hand came" in first.feedback and "The expert would now send" in \
        first.feedback
    random = metaworld.rollout(metaworld.random(np.random.default_rng(0)), seed=3)
    assert not random.success and len(random.steps) == 12
    assert random.ret < expert.ret


def test_actions_are_checked():
    assert _target([0.1, 0.6, 0.2, 1]) == ([0.1, 0.6, 0.2, 1.0], None)
    for bad in ([1, 2, 3], "up", None, [0, 0, float("nan"), 1], [[1], 2, 3, 4],
                [10 ** 400, 0, 0, 1], [0, 0, 2e6, 1]):
        values, error = _target(bad)
        assert values is None and "it must return 4 numbers [x, y, z, g]" in error


def test_feedback_text_spreads_its_steps_and_reports_errors():
    steps = [StepRecord({"t": t}, [t, 0, 0, 0], f"fb {t}") for t in range(10)]
    rollout = EpisodeRecord(steps, ret=4.5, success=False, error="KeyError: 'velocity' (line 2: x)")
    text = feedback_text(rollout, shown=3).splitlines()
    assert text[0] == "The episode ended after 10 steps with return 4.50; the task was not done."
    assert text[1] == ("Your code raised an error at step 11, which stopped the episode: "
                       "KeyError: 'velocity' (line 2: x)")
    # Indices 0, 4.5 and 9 of the 10 steps, rounded half to even.
    assert [line.split(":")[0] for line in text[3:]] == ["Step 1", "Step 5", "Step 10"]
    assert text[3] == "Step 1: observation {'t': 0}; your action [0, 0, 0, 0]; feedback: fb 0"
    assert feedback_text(EpisodeRecord(steps[:2], 1.0, True), shown=5).count("Step ") == 2
    assert rollout.summary() == ("return 4.50 in 10 steps, task not done; the code failed: "
                                 "KeyError: 'velocity' (line 2: x)")


@pytest.mark.e2e
def test_code_runs_in_the_sandbox(metaworld):
    with Sandbox(timeout=1.0) as box:
        assert box.load(GOOD_CODE, "controller").ok
        good = metaworld.rollout(sandboxed(box), seed=3)
        assert good.success and good.error is None
        assert box.load(RAISING_CODE, "controller").ok
        bad = metaworld.rollout(sandboxed(box), seed=3)
        assert bad.steps == [] and bad.error == (
            "KeyError: 'velocity' (line 2: return obs['velocity'] + [1.0])")
        assert box.load(METAWORLD_CODE, "controller").ok
        idle = metaworld.rollout(sandboxed(box), seed=3)
        assert len(idle.steps) == 12 and not idle.success


@pytest.mark.e2e
def test_a_number_past_floats_range_fails_that_code_not_the_run(metaworld):
    huge = "def controller(obs):\n    return [10 ** 400, 0.5, 0.1, 1.0]\n"
    with Sandbox(timeout=1.0) as box:
        assert box.load(huge, "controller").ok
        rollout = metaworld.rollout(sandboxed(box), seed=3)
        assert rollout.steps == [] and "it must return 4 numbers [x, y, z, g]" in rollout.error
        assert box.load(GOOD_CODE, "controller").ok  # the next candidate plays
        assert metaworld.rollout(sandboxed(box), seed=3).success


@pytest.mark.e2e
def test_crafter_target_plays_text_actions():
    target = CrafterTarget("place crafting table", length=20, version=2, feedback_type="a")
    with Sandbox(timeout=1.0) as box:
        code = ("def act(obs):\n    if obs['feedback'] is None:\n        return 'move left'\n"
                "    return 'fly' if 'Steps left: 10.' in obs['observation'] else 'do nothing'\n")
        assert box.load(code, "act").ok
        rollout = target.rollout(sandboxed(box), seed=0)
    assert len(rollout.steps) == 20 and rollout.error is None and not rollout.success
    assert rollout.steps[0].action == "move left" and rollout.steps[0].feedback
    assert any("'fly' is not an action" in (s.feedback or "") for s in rollout.steps)
    numbers = target.rollout(lambda obs: (3, None), seed=0)
    assert numbers.error == "act returned 3, but it must return an action name"
    target.close()


# ---- OptoPrime through the LM client --------------------------------------------------------
def optimizer(server: OpenAITestServer, tmp_path: Path, play: Any, **kw: Any) -> Any:
    pytest.importorskip("opto", reason="needs Trace: see docs/optimizers.md, Install")
    from llm_in_the_loop.code_policy.optoprime import CodeOptimizer

    spec = {"lm": "test-model", "base_url": server.base_url, "timeout": 5.0, "max_retries": 1,
            "backoff": 0.0, "max_backoff": 0.01, "temperature": 0, "max_tokens": 800,
            "stop": None, **kw}
    client = build_client(spec, cache_dir=tmp_path / "cache", sleep=lambda s: None)
    return CodeOptimizer(client, METAWORLD_CODE, "controller", "Place the puck at the goal.",
                         play)


@pytest.mark.e2e
def test_optoprime_answers_that_improve_garbage_and_raising_code(server, tmp_path, metaworld):
    rollouts: list[EpisodeRecord] = []
    with Sandbox(timeout=0.5) as box:
        def play(code: str) -> str:
            loaded = box.load(code, "controller")
            rollout = (EpisodeRecord(error=loaded.error) if not loaded.ok
                       else metaworld.rollout(sandboxed(box), seed=3 + len(rollouts)))
            rollouts.append(rollout)
            return rollout.summary()

        opt = optimizer(server, tmp_path, play)
        name = opt.code.py_name
        server.push(suggestion(RAISING_CODE, name), Reply("I am not sure what to do."),
                    suggestion(HANGING_CODE, name), suggestion(GOOD_CODE, name),
                    suggestion(GOOD_CODE, name), Reply.error(500), Reply.error(500))
        statuses = []
        for _ in range(6):
            output = opt.play()
            statuses.append(opt.step(output, feedback_text(rollouts[-1], 2)).status)
    assert statuses == ["updated", "unparsable", "updated", "updated", "kept", "no_answer"]
    # The idle start; the raising code; the raising code again (garbage kept it); the hanging
    # code; the good code (twice: the next answer suggests the same code, then no answer).
    assert rollouts[0].error is None and not rollouts[0].success
    assert rollouts[1].error.startswith("KeyError: 'velocity'")
    assert rollouts[3].error.startswith("TimeoutError: the code took longer than 0.5 s")
    assert rollouts[4].success and rollouts[5].success
    # OptoPrime's prompt carries the feedback of the rollout, the error included.
    user = server.requests[1].body["messages"][1]["content"]
    assert "Your code raised an error at step 1" in user and f"(code) {name}:" in user
    m = opt.llm.client.metrics()
    assert (m["api_calls"], m["parse_errors"], m["api_errors"]) == (7, 1, 1)
    assert "def controller(obs):" in opt.source and "goal" in opt.source


@pytest.mark.e2e
def test_optoprime_on_the_completions_endpoint_reads_one_text(server, tmp_path):
    opt = optimizer(server, tmp_path, lambda code: "return 0.00 in 1 steps, task not done",
                    endpoint="completions")
    server.push(suggestion("def controller(obs):\n    return [0, 0.6, 0.2, -1]\n",
                           opt.code.py_name))
    result = opt.step(opt.play(), "Move toward the puck.")
    assert result.status == "updated" and "0.6" in opt.source
    prompt = server.requests[0].body["prompt"]
    assert "#Feedback\nMove toward the puck." in prompt and prompt.endswith("\n")


@pytest.mark.e2e
def test_a_constrained_optoprime_request_carries_the_schema_of_its_answer(server, tmp_path):
    server.owned_by = "vllm"  # auto: vLLM's structured outputs
    opt = optimizer(server, tmp_path, lambda code: "return 0.00 in 1 steps, task not done")
    name = opt.code.py_name
    code = "def controller(obs):\n    return [0, 0.6, 0.2, -1]\n"
    server.push(Reply(json.dumps({"reasoning": "Move.", "answer": "", "suggestion": {name: code}})),
                suggestion(code.replace("0.6", "0.5"), name))  # no "answer": a violation
    assert opt.step(opt.play(), "Move toward the puck.").status == "updated"
    assert opt.step(opt.play(), "Move toward the puck.").status == "updated"  # read leniently
    schema = server.requests[0].body["structured_outputs"]["json"]
    assert schema["required"] == ["reasoning", "answer", "suggestion"]
    assert schema["properties"]["suggestion"]["required"] == [name]
    assert schema["properties"]["suggestion"]["properties"][name] == {
        "type": "string", "pattern": "^def controller\\(obs\\):"}
    assert "response_format" not in server.requests[0].body  # not OptoPrime's bare json_object
    assert opt.llm.client.metrics()["constraint_violations"] == 1 and "0.5" in opt.source


# ---- one OptoPrime step per env step (optimize_every=step, as Trace's notebook) -------------
@pytest.mark.e2e
def test_per_step_optimisation_calls_optoprime_once_per_env_step(server, tmp_path):
    pytest.importorskip("opto", reason="needs Trace: see docs/optimizers.md, Install")
    from llm_in_the_loop.code_policy.run import CodePolicyRun

    cfg = system_config("code_policy", tmp_path, "optimize_every=step", "iterations=1",
                        "num_eval_episodes=1", "env_spec.name=llf-metaworld-pick-place-v2",
                        "env_spec.horizon=4", "env_spec.lm_spec.lm=test-model",
                        "env_spec.lm_spec.max_retries=0",
                        f"env_spec.lm_spec.base_url={server.base_url}")
    run = CodePolicyRun(cfg, tmp_path / "run")
    name = run.learner.code.py_name
    # Step 1 plays the starting code, then raising code fails once (no env step), then the
    # good code plays steps 2 to 4, each followed by an answer with the same code (kept).
    server.push(suggestion(RAISING_CODE, name), suggestion(GOOD_CODE, name),
                *[suggestion(GOOD_CODE, name)] * 3)
    run.run()
    assert len(server.requests) == 5
    row = csv_rows(tmp_path / "run" / "iteration.csv")[0]
    assert {k: float(row[k]) for k in ("steps", "optimizer_steps", "code_error", "updated",
                                       "kept", "lm_api_calls")} == {
        "steps": 4, "optimizer_steps": 5, "code_error": 1, "updated": 2, "kept": 3,
        "lm_api_calls": 5}
    codes = [json.loads(line) for line in (tmp_path / "run" / "codes.jsonl").read_text()
             .splitlines()]
    assert [c["optimizer_step"] for c in codes] == [1, 2, 3, 4, 5]
    assert codes[0]["feedback"].startswith("Taking action [")
    assert "Received feedback: Your reward for the latest step is" in codes[0]["feedback"]
    assert codes[1]["feedback"] == ("Your code failed, so no action was taken: KeyError: "
                                    "'velocity' (line 2: return obs[\"velocity\"] + [1.0])")
    # The sandbox ran the suggested code: above the puck, as GOOD_CODE sends the hand first.
    prompt = server.requests[2].body["messages"][1]["content"]
    assert "#Feedback\nTaking action [" in prompt and f"(code) {name}:" in prompt
    step2 = codes[2]["feedback"]
    obs = json.loads(step2[step2.index("observation ") + 12:step2.index(" resulted")]
                     .replace("'", '"'))
    puck = obs["puck_pos"]
    assert codes[2]["summary"].startswith(f"step 2: played [{puck[0]}, {puck[1]}, "
                                          f"{puck[2] + 0.1}")
    assert run.optimizer_steps == 5 and "def controller" in run.learner.source


def test_optimize_every_is_checked(tmp_path):
    from ellm.errors import ConfigError
    from llm_in_the_loop.code_policy.run import validate

    with pytest.raises(ConfigError, match="optimize_every"):
        validate(system_config("code_policy", tmp_path, "optimize_every=episode"))
    with pytest.raises(ConfigError, match="optimize_every=step .* needs optimizer=llm"):
        validate(system_config("code_policy", tmp_path, "optimize_every=step",
                               "optimizer=expert"))
    with pytest.raises(ConfigError, match="env_spec.feedback_type=fn"):
        validate(system_config("code_policy", tmp_path,
                               "env_spec.name=llf-metaworld-pick-place-v2",
                               "env_spec.feedback_type=fn", "optimizer=random"))
