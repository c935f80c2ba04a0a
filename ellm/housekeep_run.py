"""Housekeep in the training loop: config checks, the env, the goal source, evaluation, metrics.

``env_spec.name=Housekeep`` selects it (see the Housekeep keys in config.yaml and
docs/housekeep.md). The workspace asks this module for what differs from Crafter; the loop
itself is the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ellm.config import ConfigError
from ellm.evaluate import Evaluator
from ellm.housekeep import HousekeepGoalSource, answer_metrics, build_housekeep_suggester
from text_housekeep import BACKENDS, HousekeepDataError, episode_count, make
from text_housekeep.backend import BackendError
from text_housekeep.data import find_scene
from text_housekeep.env import ENV_ID, STAT_KEYS
from text_housekeep.symbolic import ACTION_MODES

if TYPE_CHECKING:
    from text_housekeep.env import HousekeepTextEnv

ENV_NAME = ENV_ID


def is_housekeep(cfg: DictConfig) -> bool:
    return OmegaConf.select(cfg, "env_spec.name") == ENV_NAME


def _data_dir(spec: DictConfig) -> Path | None:
    return None if spec.housekeep_data in (None, "") else Path(str(spec.housekeep_data))


def validate(cfg: DictConfig) -> None:
    """ConfigError, naming the key, for any Housekeep setting that cannot work."""
    spec = cfg.env_spec

    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"env_spec.{key}={OmegaConf.select(spec, key)!r} is invalid: {why}")

    if spec.housekeep_action_mode not in ACTION_MODES:
        raise bad("housekeep_action_mode", f"expected one of {', '.join(ACTION_MODES)}")
    if spec.housekeep_backend not in BACKENDS:
        raise bad("housekeep_backend", f"expected one of {', '.join(BACKENDS)}")
    if spec.housekeep_backend == "habitat" and spec.housekeep_action_mode != "lowlevel":
        raise bad("housekeep_action_mode", "the habitat backend has only the lowlevel actions")
    length = spec.housekeep_length
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise bad("housekeep_length", "expected an integer >= 1")
    ep_num = spec.housekeep_ep_num
    if isinstance(ep_num, bool) or not isinstance(ep_num, int):
        raise bad("housekeep_ep_num", "expected an integer")
    if spec.single_task is not None:
        raise bad("single_task", "single-task finetuning exists only for Crafter; Housekeep "
                  "finetunes with the oracle's rewards (lm_class=SimpleOracle)")
    if cfg.single_goal_eval:
        raise ConfigError("single_goal_eval=True is invalid with env_spec.name=Housekeep: "
                          "per-goal evaluation exists only for Crafter")
    if cfg.use_language_state is not None and not spec.use_language_state:
        raise ConfigError(
            f"use_language_state={cfg.use_language_state} needs env_spec.use_language_state="
            "True with Housekeep (the environment only then writes the text observation)")
    try:
        find_scene(spec.housekeep_task, _data_dir(spec))
        count = episode_count(spec.housekeep_task, _data_dir(spec))
    except HousekeepDataError as err:
        raise ConfigError(str(err)) from None
    if not 0 <= ep_num < count:
        raise bad("housekeep_ep_num", f"scene {spec.housekeep_task} has {count} episodes "
                  f"(0..{count - 1})")


def make_env(cfg: DictConfig, seed: int) -> HousekeepTextEnv:
    """The configured episode; ``seed`` is unused (one fixed episode, deterministic game)."""
    spec = cfg.env_spec
    try:
        return make(spec.housekeep_task, spec.housekeep_ep_num,
                    action_mode=spec.housekeep_action_mode, backend=spec.housekeep_backend,
                    length=spec.housekeep_length, language_state=spec.use_language_state,
                    data_dir=_data_dir(spec))
    except (HousekeepDataError, BackendError) as err:
        raise ConfigError(str(err)) from None


def goal_source(cfg: DictConfig) -> HousekeepGoalSource:
    return HousekeepGoalSource(build_housekeep_suggester(cfg.env_spec.lm_spec))


def episode_metrics(stats: dict[str, Any]) -> dict[str, float]:
    """A training episode's Housekeep metrics (``train/rearrange_success``, ...); empty for
    Crafter episodes."""
    return {f"train/{k}": float(stats[k]) for k in STAT_KEYS if k in stats}


class HousekeepEvaluator(Evaluator):
    """Evaluation episodes on the fixed episode: ``eval/episode_reward`` (game reward: objects
    put right, net), ``eval/episode_length``, ``eval/intrinsic_reward``, the success metrics
    as ``housekeep/<name>`` (means over the episodes), and the LM's accuracy against the ground
    truth over every pair it answered so far in training and evaluation
    (``housekeep/lm_accuracy``, ``lm_precision``, ``lm_recall``, ``lm_pairs``)."""

    def run(self, frame: int) -> dict[str, float]:
        if self.ws.cfg.num_eval_episodes == 0:
            return {}
        episodes, returns = [], []
        for _ in range(self.ws.cfg.num_eval_episodes):
            stats, ret = self._episode(frame)
            self.stats.write({**stats, "frame": frame})
            episodes.append(stats)
            returns.append(ret)
        metrics = {
            "eval/episode_reward": float(np.mean([ep["reward"] for ep in episodes])),
            "eval/episode_length": float(np.mean([ep["length"] for ep in episodes])),
            "eval/intrinsic_reward": float(np.mean(returns)),
            **{f"housekeep/{k}": float(np.mean([ep[k] for ep in episodes])) for k in STAT_KEYS},
        }
        records = [self.ws.goals.suggester.answers, self.goals.suggester.answers]
        if self.goals.suggester.answerer is not None:
            metrics.update({f"housekeep/{k}": v for k, v in answer_metrics(records).items()})
        return metrics


def summary(metrics: dict[str, float], frame: int) -> str:
    """The one-line evaluation report of a Housekeep run."""
    return (f"[eval @ {frame} frames] rearrange success "
            f"{metrics['housekeep/rearrange_success']:.2f}, objects picked "
            f"{metrics['housekeep/pick_success']:.2f}, placed right "
            f"{metrics['housekeep/place_success']:.2f}, episode length "
            f"{metrics.get('eval/episode_length', float('nan')):.0f}")
