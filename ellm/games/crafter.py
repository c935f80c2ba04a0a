"""Text-Crafter as a game of the training loop (ELLM.md §2; ``CrafterTextEnv-v1`` and friends)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig

from ellm.goals import Goals, GoalSource, goal_text
from ellm.lm import build_suggester
from ellm.reward import SINGLE_TASKS, GoalReward, SingleTaskReward
from ellm.schema import one_of, parse, valid
from text_crafter import (
    ACTION_SPACES,
    EASIER_ACTIONS,
    ENV_SPECS,
    GOOD_ACTIONS,
    achievements_unlocked,
    crafter_score,
    make,
    same_action,
    success_rates,
)

# Named actions that are not goals when each goal is evaluated alone.
_NOT_GOALS = ("do nothing", "move left", "move right", "move up", "move down")


@dataclass(frozen=True)
class CrafterOptions:
    """The ``env_spec`` keys only Crafter reads (documented in config.yaml)."""

    action_space_type: str = one_of(*ACTION_SPACES)
    single_task: str | None = one_of(None, *SINGLE_TASKS)
    single_goal_hierarchical: bool | str = valid(
        "false, true or reward_last", lambda v: isinstance(v, bool) or v == "reward_last")


class CrafterGame:
    name = "crafter"
    env_ids = tuple(ENV_SPECS)
    headline = ("eval/episode_reward", "achievements/episode")
    label = ""
    scores_achievements = True
    progress_metric = None

    def validate(self, cfg: DictConfig) -> None:
        parse(CrafterOptions, cfg.env_spec, "env_spec.")

    def make_env(self, cfg: DictConfig, seed: int):
        spec = cfg.env_spec
        return make(spec.name, action_space_type=spec.action_space_type, length=spec.length,
                    dying=spec.dying, seed=seed)

    def extrinsic(self, cfg: DictConfig) -> bool:
        return ENV_SPECS[cfg.env_spec.name].extrinsic

    def paper_setting(self, cfg: DictConfig) -> bool:
        """``-v1`` ids behave as the original did (FIDELITY.md); ``-v2`` ids are the fixed
        setting."""
        return ENV_SPECS[cfg.env_spec.name].version == 1

    def needs_embedder(self, cfg: DictConfig) -> bool:
        return not self.extrinsic(cfg) and cfg.env_spec.single_task is None

    def novelty_goals(self, cfg: DictConfig) -> Sequence[str]:
        """The paper's Novelty baseline suggests every action name of the action space (139
        with ``harder``, nonsense pairs and moves included); the fixed setting the 29 actions
        that do something."""
        if self.paper_setting(cfg):
            return ACTION_SPACES[cfg.env_spec.action_space_type]
        return GOOD_ACTIONS

    def goal_source(self, cfg: DictConfig, embedder: Any) -> Goals:
        spec = cfg.env_spec
        paper = self.paper_setting(cfg)
        suggester = build_suggester(spec.lm_spec, all_goals=self.novelty_goals(cfg),
                                    paper_setting=paper)
        single = None
        if spec.single_task is not None:
            single = SingleTaskReward(spec.single_task, spec.single_goal_hierarchical)
        reward = None
        if not self.extrinsic(cfg) and single is None:
            reward = GoalReward(embedder, spec.threshold)
        # The paper's extrinsic runs (CrafterReward-v1) show the agent no goal.
        show = not (paper and self.extrinsic(cfg))
        return GoalSource(suggester, reward, single, check_success=spec.check_ac_success,
                          show_goals=show)

    def goal_text(self, cfg: DictConfig, goals: Sequence[str]) -> str:
        return goal_text(goals, paper_setting=self.paper_setting(cfg))

    def episode_metrics(self, stats: Mapping[str, float]) -> dict[str, float]:
        return {"train/achievements": achievements_unlocked(stats)}

    def eval_metrics(self, episodes: Sequence[Mapping[str, float]],
                     goals: Sequence[Goals]) -> dict[str, float]:
        """Achievements unlocked per episode (the paper's headline metric, logged as
        ``eval/episode_reward``), the Crafter score and each achievement's success rate."""
        rates = success_rates(episodes)
        return {
            "eval/episode_reward": float(np.mean([achievements_unlocked(ep) for ep in episodes])),
            "eval/score": crafter_score(rates),
            **{f"achievements/{name}": rate for name, rate in rates.items()},
        }

    def single_goals(self, cfg: DictConfig) -> list[str]:
        """The finetuning task, else every useful named action."""
        if cfg.env_spec.single_task is not None:
            return [cfg.env_spec.single_task]
        return [name for name in EASIER_ACTIONS if name not in _NOT_GOALS]

    def goal_achieved(self, info: Mapping[str, Any], goal: str) -> bool:
        return bool(info["effective_success"]) and same_action(info["action_name"], goal)

    def describe(self, metrics: Mapping[str, float]) -> str:
        return (f"{metrics['eval/episode_reward']:.2f} achievements unlocked per episode, "
                f"Crafter score {metrics['eval/score']:.2f}%")

    def summary(self, metrics: Mapping[str, float], frame: int) -> str:
        return (f"[eval @ {frame} frames] achievements/episode "
                f"{metrics.get('eval/episode_reward', float('nan')):.2f}, crafter score "
                f"{metrics.get('eval/score', float('nan')):.2f}%, episode length "
                f"{metrics.get('eval/episode_length', float('nan')):.0f}")
