"""Text-Housekeep as a game of the training loop (``env_spec.name=Housekeep``; HOUSEKEEP.md,
docs/housekeep.md). The method on top of it (yes/no questions, goals, reward) is
:mod:`.goals`."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ellm.errors import ConfigError
from ellm.games.housekeep.goals import (
    HousekeepGoalReward,
    HousekeepGoals,
    answer_metrics,
    build_housekeep_suggester,
)
from ellm.games.report import GameReport
from ellm.goals import Goals, NoGoals, goal_text
from ellm.lm import LMSpec
from ellm.reward import StepReward
from ellm.run.schema import integer, is_int, one_of, parse, valid
from text_game.stats import StatsWriter

if TYPE_CHECKING:
    from ellm.run.spec import EnvOptions, RunSpec
from text_housekeep import (
    ACTION_MODES,
    BACKENDS,
    ENV_VERSIONS,
    PICK,
    PLACE,
    STAT_KEYS,
    BackendError,
    HousekeepDataError,
    episode_count,
    find_scene,
    make,
)


@dataclass(frozen=True)
class HousekeepOptions:
    """The ``env_spec`` keys only Housekeep reads (documented in config.yaml)."""

    housekeep_action_mode: str = one_of(*ACTION_MODES)
    housekeep_backend: str = one_of(*BACKENDS)
    housekeep_length: int = integer(1)
    housekeep_ep_num: int = valid("an integer", is_int)
    housekeep_task: str = valid("a scene name", lambda v: isinstance(v, str))
    housekeep_data: str | None = valid("a directory, or null",
                                       lambda v: v is None or isinstance(v, str))

    @property
    def data_dir(self) -> Path | None:
        return Path(self.housekeep_data) if self.housekeep_data else None


class HousekeepGame:
    name = "housekeep"
    env_ids = tuple(ENV_VERSIONS)
    headline = ("housekeep/rearrange_success", "rearrange success")
    report = GameReport("housekeep", label="Housekeep",
                        progress_metric=("rearrange_success", "Housekeep: rearrangement success"),
                        table_metrics=("rearrange_success", "misplaced_success", "pick_success",
                                       "place_success", "soft_score"))
    stats_writer = StatsWriter  # episodes in Crafter's stats.jsonl format
    eval_line = (("rearrange success", "housekeep/rearrange_success", "{:.2f}"),
                 ("objects picked", "housekeep/pick_success", "{:.2f}"),
                 ("placed right", "housekeep/place_success", "{:.2f}"),
                 ("episode length", "eval/episode_length", "{:.0f}"))

    def validate(self, cfg: DictConfig, env: EnvOptions, lm: LMSpec) -> HousekeepOptions:
        spec = cfg.env_spec

        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"env_spec.{key}={OmegaConf.select(spec, key)!r} is invalid: {why}")

        own = parse(HousekeepOptions, spec, "env_spec.")
        if not lm.blocking and lm.lm_class == "GPTLanguageModel" and not lm.dummy_lm:
            raise bad("lm_spec.blocking", "Housekeep's yes/no queries always wait for their "
                      "answer; the non-blocking mode exists for Crafter's goal suggestions")
        if spec.housekeep_backend == "habitat" and spec.housekeep_action_mode != "lowlevel":
            raise bad("housekeep_action_mode", "the habitat backend has only the lowlevel actions")
        if spec.single_task is not None:
            raise bad("single_task", "single-task finetuning exists only for Crafter; Housekeep "
                      "finetunes with the oracle's rewards (lm_class=SimpleOracle)")
        if cfg.single_goal_eval:
            raise ConfigError("single_goal_eval=True is invalid with env_spec.name=Housekeep: "
                              "per-goal evaluation exists only for Crafter")
        if cfg.use_language_state is not None and not env.writes_text:
            raise ConfigError(
                f"use_language_state={cfg.use_language_state} needs env_spec.text_obs=True (or "
                "the original's env_spec.use_language_state=True) with Housekeep: the "
                "environment only then writes the text observation")
        try:
            find_scene(own.housekeep_task, own.data_dir)
            count = episode_count(own.housekeep_task, own.data_dir)
        except HousekeepDataError as err:
            raise ConfigError(str(err)) from None
        if not 0 <= own.housekeep_ep_num < count:
            raise bad("housekeep_ep_num", f"scene {own.housekeep_task} has {count} episodes "
                      f"(0..{count - 1})")
        return own

    def make_env(self, spec: RunSpec, seed: int):
        """The configured episode; ``seed`` is unused (one fixed episode, deterministic game)."""
        own = spec.game_options
        try:
            return make(own.housekeep_task, own.housekeep_ep_num,
                        action_mode=own.housekeep_action_mode, backend=own.housekeep_backend,
                        length=own.housekeep_length, language_state=spec.env.writes_text,
                        data_dir=own.data_dir, version=ENV_VERSIONS[spec.env.name])
        except (HousekeepDataError, BackendError) as err:
            raise ConfigError(str(err)) from None

    def extrinsic(self, env_name: str) -> bool:
        return False  # trained on LM rewards; the game reward is logged and evaluated

    def paper_setting(self, env_name: str) -> bool:
        """``Housekeep`` behaves as the original did; ``Housekeep-v2`` is the fixed setting."""
        return ENV_VERSIONS[env_name] == 1

    def needs_embedder(self, spec: RunSpec) -> bool:
        return False  # its reward matches captions exactly

    def novelty_goals(self, spec: RunSpec) -> Sequence[str]:
        return ()  # the Novelty suggester enumerates the (object, receptacle) pairs it sees

    def goals(self, spec: RunSpec, embedder: Any, goal_reward: bool
              ) -> tuple[Goals, list[StepReward]]:
        """The LM's placements and, with ``goal_reward``, ELLM's reward on them; without it no
        goal is suggested (an agent reading Housekeep goals learns from them)."""
        if not goal_reward:
            return NoGoals(), []
        paper = self.paper_setting(spec.env.name)
        goals = HousekeepGoals(build_housekeep_suggester(spec.lm, per_class=paper))
        bonus = goals.suggester.novelty_bonus
        return goals, [HousekeepGoalReward(paper_setting=paper, novelty_bonus=bonus)]

    def episode_metrics(self, stats: Mapping[str, float]) -> dict[str, float]:
        """``train/rearrange_success`` and the other success metrics of the episode."""
        return {f"train/{k}": float(stats[k]) for k in STAT_KEYS if k in stats}

    def eval_metrics(self, episodes: Sequence[Mapping[str, float]],
                     goals: Sequence[Goals]) -> dict[str, float]:
        """``eval/episode_reward`` (game reward: objects put right, net), the success metrics
        as ``housekeep/<name>`` (means over the episodes), and the LM's accuracy against the
        ground truth over every pair it answered so far in training and evaluation
        (``housekeep/lm_accuracy``, ``lm_precision``, ``lm_recall``, ``lm_pairs``)."""
        metrics = {
            "eval/episode_reward": float(np.mean([ep["reward"] for ep in episodes])),
            **{f"housekeep/{k}": float(np.mean([ep[k] for ep in episodes])) for k in STAT_KEYS},
        }
        sources = [g for g in goals if isinstance(g, HousekeepGoals)]
        if sources and all(source.suggester.answerer is not None for source in sources):
            records = [source.suggester.answers for source in sources]
            metrics.update({f"housekeep/{k}": v for k, v in answer_metrics(records).items()})
        return metrics

    def single_goals(self, spec: RunSpec) -> list[str]:
        return []

    def goal_text(self, spec: RunSpec, goals: Sequence[str]) -> str:
        return goal_text(goals)

    def goal_achieved(self, info: Mapping[str, Any], goal: str) -> bool:
        return info.get("transition_caption") == goal

    def covered(self, info: Mapping[str, Any]) -> tuple[Hashable, ...]:
        """The object picked, or the object and the receptacle of a place: what the agent
        interacted with (moving and looking reach nothing; a failed grab moved nothing)."""
        event = info["event"]
        if event.kind == PICK:
            return (("object", event.obj),)
        if event.kind == PLACE:
            return (("object", event.obj), ("receptacle", event.rec))
        return ()

    def describe(self, metrics: Mapping[str, float]) -> str:
        return (f"{100 * metrics['housekeep/rearrange_success']:.0f}% of the objects put where "
                f"they belong, game reward {metrics['eval/episode_reward']:.2f} per episode")

