"""Intrinsic rewards: SBERT threshold, synonyms, novelty, success gate, single-task modes."""

import numpy as np
import pytest
from conftest import ROOT

from ellm.embed import SentenceEmbedder
from ellm.games.crafter.goals import CrafterGoalReward, text_state
from ellm.games.crafter.suggesters import build_suggester
from ellm.games.crafter.task import TASK_CHAINS, SingleTaskReward, TaskGoals, TaskReward
from ellm.goals import SuggestedGoals, goal_text
from ellm.reward import GameReward, GoalReward, Scored, StepData
from text_crafter import GOOD_ACTIONS, SYNONYMS


@pytest.fixture(scope="module")
def embedder():
    return SentenceEmbedder()


def test_exact_caption_pays_its_cosine(embedder):
    reward = GoalReward(embedder, threshold=0.99)
    value, goal = reward("chop tree", ["drink water", "chop tree"])
    assert goal == "chop tree" and value == pytest.approx(1.0, abs=1e-5)
    assert reward("chop tree", []) == (0.0, None)
    assert reward("", ["chop tree"]) == (0.0, None)  # failed success gate: no caption


def test_threshold_is_strict_and_value_is_the_cosine(embedder):
    a, b = embedder.embed(["chop grass", "chop tree"])
    cos = float(a @ b)
    assert 0.3 < cos < 0.99
    assert GoalReward(embedder, 0.99)("chop grass", ["chop tree"]) == (0.0, None)
    value, goal = GoalReward(embedder, cos - 1e-4)("chop grass", ["chop tree"])
    assert goal == "chop tree" and value == pytest.approx(cos, abs=1e-6)
    assert GoalReward(embedder, cos + 1e-4)("chop grass", ["chop tree"]) == (0.0, None)


def test_synonyms_match_either_phrasing(embedder):
    reward = GoalReward(embedder, 0.99, synonyms=SYNONYMS)
    value, goal = reward("attack cow", ["drink water", "eat cow"])
    assert goal == "eat cow" and value == pytest.approx(1.0, abs=1e-5)
    value, goal = reward("make crafting table", ["place crafting table"])
    assert goal == "place crafting table" and value == pytest.approx(1.0, abs=1e-5)


STATE = {"caption": "You see grass, tree, and water. You are targeting tree.",
         "inventory": "", "status": "", "text_obs": ""}
INFO = {"inventory": {"health": 9, "food": 9, "drink": 9, "energy": 9, "sapling": 0, "wood": 0,
                      "stone": 0, "coal": 0, "iron": 0, "diamond": 0, "wood_pickaxe": 0,
                      "stone_pickaxe": 0, "iron_pickaxe": 0, "wood_sword": 0, "stone_sword": 0,
                      "iron_sword": 0}}


def step_info(action, caption, effective=True):
    return {"action_name": action, "transition_caption": caption, "effective_success": effective}


def goal_reward(embedder, lm_class="SimpleOracle", check_success=True):
    """Crafter's goal source and goal reward on it, as a run builds them."""
    goals = SuggestedGoals(build_suggester({"lm_class": lm_class}, all_goals=GOOD_ACTIONS,
                                           synonyms=SYNONYMS), text_state)
    reward = CrafterGoalReward(GoalReward(embedder, 0.99, synonyms=SYNONYMS),
                               check_success=check_success and goals.uses_success_gate)
    return goals, reward


def pay(reward, goals, info):
    return reward.step(StepData(0, 0.0, info, list(goals))).value


def step(source, reward, goals, info, state=STATE):
    """One step as the rollout takes it: the reward, then the goal source learns what it
    achieved. Returns (reward, next goals)."""
    value, achieved = reward.step(StepData(0, 0.0, info, list(goals)))
    return value, source.observe(state, INFO, [achieved] if achieved else [])


def test_novelty_pays_a_goal_once_per_episode(embedder):
    source, reward = goal_reward(embedder)
    goals = source.reset(STATE, INFO)
    reward.reset()
    assert "chop tree" in goals and "drink water" in goals
    value, goals = step(source, reward, goals, step_info("chop tree", "chop tree"))
    assert value == pytest.approx(1.0, abs=1e-5)
    assert "chop tree" not in goals and "drink water" in goals
    assert pay(reward, goals, step_info("chop tree", "chop tree")) == 0.0
    assert reward.episode_metrics() == {"goal_matches": 1.0}
    assert "chop tree" in source.reset(STATE, INFO)  # a new episode forgets
    reward.reset()
    assert reward.episode_metrics() == {"goal_matches": 0.0}


def test_a_reward_only_reports_its_goal_the_goal_source_retires_it_when_told(embedder):
    source, reward = goal_reward(embedder)
    goals = source.reset(STATE, INFO)
    scored = reward.step(StepData(0, 0.0, step_info("chop tree", "chop tree"), goals))
    assert scored.achieved == "chop tree" and scored.value > 0.99
    assert "chop tree" in source.observe(STATE, INFO)  # the reward alone retired nothing
    assert "chop tree" not in source.observe(STATE, INFO, [scored.achieved])


def test_a_synonym_retires_the_goal_it_achieved(embedder):
    source, reward = goal_reward(embedder)
    goals = source.reset({**STATE, "caption": "You see cow."}, INFO)
    assert "attack cow" in goals
    value, goals = step(source, reward, goals, step_info("eat cow", "eat cow"),
                        {**STATE, "caption": "You see cow."})
    assert value > 0.99 and "attack cow" not in goals


def test_success_gate_and_novelty_baseline_ignoring_it(embedder):
    oracle, gated = goal_reward(embedder)
    goals = oracle.reset(STATE, INFO)
    assert pay(gated, goals, step_info("chop tree", "", effective=False)) == 0.0  # gate failed
    ungated_goals, ungated = goal_reward(embedder, check_success=False)
    goals = ungated_goals.reset(STATE, INFO)
    assert pay(ungated, goals, step_info("chop tree", "", effective=False)) > 0.99
    novelty, paid = goal_reward(embedder, "BaselineModel")
    goals = novelty.reset(STATE, INFO)
    assert set(goals) == set(GOOD_ACTIONS)
    value, goals = step(novelty, paid, goals, step_info("mine diamond", "", effective=False))
    assert value > 0.99 and "mine diamond" not in goals


def test_the_game_reward_is_a_weighted_per_step_reward():
    info = step_info("chop tree", "chop tree")
    assert GameReward().step(StepData(0, 0.5, info, [])) == (0.5, None)
    assert GameReward(2.0).step(StepData(0, 0.5, info, [])) == (1.0, None)
    assert GameReward().per_step and GameReward().name == "game"


def test_single_task_pays_effective_task_actions_with_synonyms():
    task = SingleTaskReward("attack cow")
    assert task.goal == "attack cow"
    assert task("eat cow", True) == 1.0
    assert task("attack cow", False) == 0.0
    assert task("chop tree", True) == 0.0
    assert task("attack cow", True) == 1.0  # every time, not once


def test_single_task_hierarchical_and_reward_last():
    chain = TASK_CHAINS["make wood pickaxe"]
    assert chain == ("chop tree", "chop tree", "place crafting table", "make wood pickaxe")
    for mode, expected in [(True, [1.0, 1.0, 1.0, 1.0]), ("reward_last", [0.0, 0.0, 0.0, 1.0])]:
        task = SingleTaskReward("make wood pickaxe", hierarchical=mode)
        shown, paid = [], []
        assert task("make wood pickaxe", True) == 0.0  # not the current subtask
        for action in chain:
            shown.append(task.goal)
            paid.append(task(action, True))
        assert shown == list(chain) and paid == expected
        assert task.goal == "make wood pickaxe"
        task.reset()
        assert task.goal == "chop tree"
    with pytest.raises(ValueError, match="single_goal_hierarchical"):
        SingleTaskReward("attack cow", hierarchical="yes")


def test_goal_source_single_task_shows_the_subtask():
    task = SingleTaskReward("place plant", hierarchical="reward_last")
    source, reward = TaskGoals(task), TaskReward(task)
    assert source.reset(STATE, INFO) == ["chop grass"]
    assert pay(reward, [], step_info("chop grass", "chop grass")) == 0.0
    assert source.observe(STATE, INFO) == ["place plant"]
    assert pay(reward, [], step_info("place plant", "place plant")) == 1.0
    assert goal_text(["place plant"]) == "Your goal is: place plant."
    assert goal_text([]) == "Your goal is: none."


def test_embedder_embeds_each_string_once(embedder):
    before = embedder.cache_info()
    reward = GoalReward(embedder, 0.99)
    for _ in range(5):
        reward("unique caption xyz", ["unique goal xyz"])
    after = embedder.cache_info()
    assert after.misses - before.misses == 2
    assert np.allclose(embedder.embed(["unique goal xyz"]),
                       embedder.model.encode(["unique goal xyz"], normalize_embeddings=True),
                       atol=1e-5)


class StepCount:
    """A method's own per-step reward: the number of the step in its episode."""

    name, per_step = "count", True

    def __init__(self) -> None:
        self.t = 0

    def reset(self) -> None:
        self.t = 0

    def step(self, data: StepData) -> Scored:
        self.t += 1
        return Scored(float(self.t))

    def episode_metrics(self) -> dict[str, float]:
        return {"count_steps": float(self.t)}


def count_rewards(spec) -> list[StepCount]:
    return [StepCount()]


def test_a_methods_own_per_step_reward_is_in_every_rollout_and_the_stored_reward():
    """``Method.rewards`` (docs/baselines.md, "Adding a method"): built afresh for each rollout,
    the reward the replay stores, reported by its name."""
    import dataclasses
    import pickle

    import torch
    from hydra import compose, initialize_config_dir

    from ellm.loop.parts import goal_source, rollout_parts
    from ellm.method import Method
    from ellm.run.config import validate

    with initialize_config_dir(str(ROOT), version_base="1.3"):
        cfg = compose("config", overrides=["device=cpu", "env_spec.name=CrafterTextEnv-v2"])
    count = Method("count", goal_reward=False, game_reward=False, rewards=count_rewards)
    run = dataclasses.replace(validate(cfg), method=count)
    assert pickle.loads(pickle.dumps(count)) == count  # actors receive it pickled
    parts = rollout_parts(run, torch.device("cpu"), env_seed=1)
    assert [r.name for r in parts.rewards] == ["count"]
    rollout = parts.rollout(cfg.frame_stack)
    rollout.reset()
    steps = [rollout.step(lambda inputs: 0) for _ in range(3)]
    assert [s.reward for s in steps] == [1.0, 2.0, 3.0]
    summary = rollout.summary()
    assert summary["return/count"] == 6.0 and summary["count_steps"] == 3.0
    _, eval_rewards = goal_source(run, None)
    assert [r.name for r in eval_rewards] == ["count"] and eval_rewards[0] is not parts.rewards[0]
