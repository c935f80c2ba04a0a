"""``llf-metaworld-pick-place-v2``: built by gymnasium.make, in the LLF contract with LLF-Bench's
Meta-World types and feedback, and the notebook's expert reference."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("metaworld", reason="needs the optim extra: pip install -e '.[optim]'")

import llm_in_the_loop  # noqa: F401 - registers the id

ENV_ID = "llf-metaworld-pick-place-v2"
FIELDS = {"hand_pos", "gripper_distance_apart", "puck_pos", "puck_rot", "goal_pos"}


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    env = gym.make(ENV_ID)
    yield env
    env.close()


def test_the_id_builds_and_follows_the_contract(env):
    base = env.unwrapped
    assert (base.INSTRUCTION_TYPES, base.FEEDBACK_TYPES) == (("b",), ("r", "hp", "hn", "fp"))
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    assert base.reward_range == (0.0, 10.0)
    obs, info = env.reset(seed=0)
    assert set(obs) == {"observation", "instruction", "feedback"} and obs["feedback"] is None
    assert "pick up the puck and place it at the goal" in obs["instruction"]
    assert set(json.loads(obs["observation"])) == FIELDS and info == {"success": False}
    assert env.observation_space["observation"].contains(obs["observation"])
    nxt, reward, terminated, truncated, info = env.step([0.0, 0.6, 0.2, 0.0])
    assert nxt["instruction"] is None and isinstance(nxt["feedback"], str)
    assert type(reward) is float and 0.0 <= reward <= 10.0
    assert (terminated, truncated, info) == (False, False, {"success": False,
                                                            "valid_action": True})
    # The hand went where it was sent, within the mocap's lag of a few millimetres.
    assert np.allclose(json.loads(nxt["observation"])["hand_pos"], [0.0, 0.6, 0.2], atol=5e-3)


def test_feedback_kinds_as_llf_bench_defines_them(env):
    env.unwrapped.set_feedback_type("a")
    obs, _ = env.reset(seed=0)
    expert = env.unwrapped.expert_action
    hand = json.loads(obs["observation"])["hand_pos"]
    toward = [*(np.asarray(hand) + 0.5 * (expert[:3] - hand)), 0.0]
    away = [*(np.asarray(hand) - (expert[:3] - hand)), 1.0]  # and closing a gripper it should open
    for kind, action, says in (
            ("hp", toward, "The hand moved closer to where it should go."),
            ("hn", away, ("The hand moved away from where it should go. You should open the "
                          "gripper.")),
            ("r", toward, "Your reward for the latest step is "),
            ("fp", toward, "Next, move to [")):
        env.unwrapped.set_feedback_type(kind)
        env.reset(seed=0)
        feedback = env.step(action)[0]["feedback"]
        assert feedback.startswith(says), (kind, feedback)
    env.unwrapped.set_feedback_type("fp")
    env.reset(seed=0)
    env.step(toward)
    target = ", ".join(f"{v:.3f}" for v in env.unwrapped.expert_action)
    assert env.step(toward)[0]["feedback"] == f"Next, move to [{target}]."  # after the move
    env.unwrapped.set_feedback_type("n")
    env.reset(seed=0)
    assert env.step(toward)[0]["feedback"] == ""
    env.unwrapped.set_feedback_type(("hp", "hn"))
    assert env.unwrapped.feedback_type == {"hp", "hn"}


def test_a_non_action_holds_the_hand_and_says_so(env):
    env.unwrapped.set_feedback_type("n")
    obs, _ = env.reset(seed=0)
    nxt, _, _, _, info = env.step("move up")
    assert nxt["feedback"] == ("'move up' is not an action: expected 4 numbers [x, y, z, g]; "
                               "the hand stayed where it was.")
    assert not info["valid_action"]
    before, after = (json.loads(o["observation"])["hand_pos"] for o in (obs, nxt))
    assert np.allclose(before, after, atol=5e-3)
    assert not env.step([0.0, 0.6, float("nan"), 0.0])[4]["valid_action"]


def test_types_and_bounds_are_checked():
    for kwargs, message in (({"feedback_type": "fn"}, "feedback_type='fn' is invalid here"),
                            ({"instruction_type": "c"}, "instruction_type='c' is invalid"),
                            ({"visual": True}, "visual=True is invalid")):
        with pytest.raises(ValueError, match=message):
            gym.make(ENV_ID, **kwargs)
    env = gym.make(ENV_ID, length=2)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step([0.0, 0.6, 0.2, 0.0])
    env.reset(seed=1)
    assert [env.step([0.0, 0.6, 0.2, 0.0])[3] for _ in range(2)] == [False, True]
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step([0.0, 0.6, 0.2, 0.0])
    env.close()


def test_two_runs_of_a_seed_are_the_same(env):
    env.unwrapped.set_feedback_type("m")
    runs = []
    for _ in range(2):
        obs, _ = env.reset(seed=5)
        env.action_space.seed(5)
        runs.append([obs, *(env.step(env.action_space.sample())[:2] for _ in range(3))])
    assert runs[0] == runs[1]


def expert_episode(env: gym.Env, seed: int | None) -> tuple[int, list[float], bool]:
    """The notebook's expert_run: a random first action, then the env's expert_action, until
    success or the horizon; its steps, rewards and success."""
    env.reset(seed=seed)
    action, rewards = env.action_space.sample(), []
    for _ in range(30):
        _, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        if terminated or truncated or info["success"]:
            break
        action = env.unwrapped.expert_action
    return len(rewards), rewards, info["success"]


def test_the_notebooks_call_sequence_gives_six_steps():
    # TracedEnv(env_name, seed=0): the env is reset with the seed and the action space seeded;
    # expert_run then resets again without one, so the episode is the seed's second world.
    random.seed(0)
    np.random.seed(0)
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    env.action_space.seed(0)
    steps, rewards, success = expert_episode(env, None)
    env.close()
    assert success and steps == 6 and round(sum(rewards), 2) == 6.70


def test_the_controller_moves_on_after_success(env):
    # LLF-Bench's controller stops only within 0.1 mm of the target or after 20 simulator
    # steps, so the puck goes on to the goal and the success step earns Meta-World's 10.
    env.unwrapped.set_feedback_type("a")
    env.action_space.seed(0)
    steps, rewards, success = expert_episode(env, 0)
    assert success and steps == 7 and rewards[-1] == 10.0 and round(sum(rewards), 2) == 15.48
