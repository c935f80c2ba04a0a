"""Text-Crafter as a game of the training loop (ELLM.md §2; ``CrafterTextEnv-v1`` and friends).

The game is :mod:`text_crafter`; ELLM's pieces that read its captions and info keys live here:
goals and goal reward (:mod:`.goals`), a single task (:mod:`.task`), the suggesters (:mod:`.state`,
:mod:`.oracle`, :mod:`.prompts`, :mod:`.suggesters`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig

from ellm.games.crafter.goals import CrafterGoalReward, text_state
from ellm.games.crafter.suggesters import build_suggester
from ellm.games.crafter.task import SINGLE_TASKS, SingleTaskReward, TaskGoals, TaskReward
from ellm.games.report import GameReport
from ellm.goals import Goals, NoGoals, SuggestedGoals, goal_text
from ellm.lm import LMSpec
from ellm.reward import GoalReward, StepReward
from ellm.run.schema import one_of, parse, valid
from text_crafter import (
    ACHIEVEMENTS,
    ACTION_SPACES,
    EASIER_ACTIONS,
    ENV_SPECS,
    GOOD_ACTIONS,
    SYNONYMS,
    achievements_unlocked,
    crafter_score,
    make,
    reported_names,
    same_action,
    success_rates,
)
from text_game.stats import StatsWriter

if TYPE_CHECKING:
    from ellm.run.spec import EnvOptions, RunSpec

# Named actions that are not goals when each goal is evaluated alone.
_NOT_GOALS = ("do nothing", "move left", "move right", "move up", "move down")


@dataclass(frozen=True)
class CrafterOptions:
    """The ``env_spec`` keys only Crafter reads (documented in config.yaml)."""

    action_space_type: str = one_of(*ACTION_SPACES)
    single_task: str | None = one_of(None, *SINGLE_TASKS)
    single_goal_hierarchical: bool | str = valid(
        "false, true or reward_last", lambda v: isinstance(v, bool) or v == "reward_last")
    novelty_goals: str = one_of("auto", "all", "effective")


class CrafterGame:
    name = "crafter"
    env_ids = tuple(ENV_SPECS)
    headline = ("eval/episode_reward", "achievements/episode")
    report = GameReport("crafter", label="", achievements=tuple(ACHIEVEMENTS),
                        success_rates=success_rates, score=crafter_score)
    stats_writer = StatsWriter  # episodes in Crafter's stats.jsonl format
    eval_line = (("achievements/episode", "eval/episode_reward", "{:.2f}"),
                 ("crafter score", "eval/score", "{:.2f}%"),
                 ("episode length", "eval/episode_length", "{:.0f}"))

    def validate(self, cfg: DictConfig, env: EnvOptions, lm: LMSpec) -> CrafterOptions:
        return parse(CrafterOptions, cfg.env_spec, "env_spec.")

    def make_env(self, spec: RunSpec, seed: int):
        env = spec.env
        return make(env.name, action_space_type=spec.game_options.action_space_type,
                    length=env.length, dying=env.dying, seed=seed)

    def extrinsic(self, env_name: str) -> bool:
        return ENV_SPECS[env_name].extrinsic

    def paper_setting(self, env_name: str) -> bool:
        """``-v1`` ids behave as the original did (FIDELITY.md); ``-v2`` ids are the fixed
        setting."""
        return ENV_SPECS[env_name].version == 1

    def needs_embedder(self, spec: RunSpec) -> bool:
        """Its goal reward compares captions with SBERT (a single task matches names)."""
        return spec.game_options.single_task is None

    def novelty_goals(self, spec: RunSpec) -> Sequence[str]:
        """The Novelty baseline's goals (``env_spec.novelty_goals``): ``all`` the action names
        the action space reports (139 with ``harder``, nonsense pairs and moves included: the
        paper's; ``crafter``'s "do" by each name it takes), ``effective`` the 29 actions that do
        something (the fixed setting's); ``auto`` picks by setting."""
        choice = spec.game_options.novelty_goals
        if choice == "auto":
            choice = "all" if self.paper_setting(spec.env.name) else "effective"
        if choice == "all":
            return reported_names(spec.game_options.action_space_type)
        return GOOD_ACTIONS

    def goal_vocabulary(self, spec: RunSpec) -> list[str]:
        """The goals a constrained LM answer may name: the action names the configured action
        space reports that do something, moves and the no-op excepted (``harder``'s verb-noun
        pairs that are a no-op in every state are no goals; ``crafter``'s "do" counts as each
        action it carries out)."""
        return [name for name in reported_names(spec.game_options.action_space_type)
                if name in GOOD_ACTIONS and name not in _NOT_GOALS]

    def goals(self, spec: RunSpec, embedder: Any, goal_reward: bool
              ) -> tuple[Goals, list[StepReward]]:
        """The goal source and, with ``goal_reward``, ELLM's per-step reward on it: the LM's
        goals (or a single task's) paid by :class:`CrafterGoalReward` (or the task). Without the
        goal reward, goals are suggested only for an agent that reads them (``use_goal``),
        never in the paper's extrinsic runs, which showed none."""
        own, name = spec.game_options, spec.env.name
        if own.single_task is not None and goal_reward:
            task = SingleTaskReward(own.single_task, own.single_goal_hierarchical)
            return TaskGoals(task), [TaskReward(task)]
        paper = self.paper_setting(name)
        if not goal_reward and (not spec.agent.use_goal or (paper and self.extrinsic(name))):
            return NoGoals(), []
        suggester = build_suggester(spec.lm, all_goals=self.novelty_goals(spec),
                                    paper_setting=paper, synonyms=SYNONYMS,
                                    goal_vocabulary=self.goal_vocabulary(spec))
        goals = SuggestedGoals(suggester, text_state)
        if not goal_reward:
            return goals, []
        reward = GoalReward(embedder, spec.env.threshold, synonyms=SYNONYMS)
        gated = spec.env.check_ac_success and goals.uses_success_gate
        return goals, [CrafterGoalReward(reward, check_success=gated)]

    def goal_text(self, spec: RunSpec, goals: Sequence[str]) -> str:
        return goal_text(goals, paper_setting=self.paper_setting(spec.env.name))

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

    def single_goals(self, spec: RunSpec) -> list[str]:
        """The finetuning task, else every useful named action."""
        if spec.game_options.single_task is not None:
            return [spec.game_options.single_task]
        return [name for name in EASIER_ACTIONS if name not in _NOT_GOALS]

    def goal_achieved(self, info: Mapping[str, Any], goal: str) -> bool:
        return bool(info["effective_success"]) and same_action(info["action_name"], goal)

    def covered(self, info: Mapping[str, Any]) -> tuple[Hashable, ...]:
        """The map cell the player stands on."""
        x, y = info["player_pos"]
        return ((int(x), int(y)),)

    def describe(self, metrics: Mapping[str, float]) -> str:
        return (f"{metrics['eval/episode_reward']:.2f} achievements unlocked per episode, "
                f"Crafter score {metrics['eval/score']:.2f}%")
