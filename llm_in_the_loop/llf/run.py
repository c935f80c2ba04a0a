"""A language-feedback run (``python -m llm_in_the_loop.llf_run [key=value ...]``, config
``conf/llf.yaml``): its run directory reads like a training run's, so the report shows it beside
the DQN methods (docs/llf.md, "The run command")."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from omegaconf import DictConfig

import ellm
import text_crafter
import text_housekeep
from ellm.errors import ConfigError
from ellm.games import Game, game_named
from ellm.lm import build_client
from ellm.loop.timing import EverySeconds, duration
from ellm.run.command_line import hydra_entry, run_dir_lines, write_record
from ellm.run.config import check_lm_spec, run_config
from ellm.run.logger import Logger
from ellm.run.schema import boolean, integer, is_int, non_negative, one_of, parse, valid
from llm_in_the_loop.llf.policies import LLMPolicy, RandomPolicy, ScriptedPolicy
from text_crafter import achievements_unlocked, crafter_score, success_rates
from text_crafter.tasks import SINGLE_TASKS
from text_game.llf import FEEDBACK_TYPES, INSTRUCTION_TYPES
from text_game.stats import StatsWriter
from text_housekeep import STAT_KEYS, HousekeepDataError, episode_count

log = logging.getLogger(__name__)
GAMES = {text_crafter.LLF_ENV_ID: "crafter", text_housekeep.LLF_ENV_ID: "housekeep"}
METHODS = {"llm": "llm-policy", "scripted": "scripted-policy", "random": "random-policy"}
# Per-episode differences of these LM counters go to llf.csv.
_LM_PER_EPISODE = ("api_calls", "cache_hits", "prompt_tokens", "completion_tokens",
                   "parse_errors", "api_errors")


@dataclass(frozen=True)
class LLFOptions:

    policy: str = one_of(*METHODS)
    num_episodes: int = integer(1)
    history: int = integer(0)
    seed: int = integer(0)
    progress_every_s: float = non_negative()


@dataclass(frozen=True)
class LLFEnvOptions:

    name: str = one_of(*GAMES)
    instruction_type: str = one_of(*INSTRUCTION_TYPES)
    feedback_type: str = one_of(*FEEDBACK_TYPES)
    single_task: str | None = one_of(None, *SINGLE_TASKS)
    version: int = one_of(1, 2)
    length: int = integer(1)
    dying: bool = boolean()
    housekeep_task: str = valid("a scene name", lambda v: isinstance(v, str))
    housekeep_ep_num: int | None = valid("null or an integer >= 0",
                                         lambda v: v is None or (is_int(v) and v >= 0))
    housekeep_length: int = integer(1)


def validate(cfg: DictConfig) -> tuple[LLFOptions, LLFEnvOptions]:
    """Check the config once; a :class:`ConfigError` names the key."""
    opts = parse(LLFOptions, cfg)
    spec = parse(LLFEnvOptions, cfg.env_spec, "env_spec.")
    if opts.policy == "scripted" and spec.feedback_type != "fp":
        raise ConfigError(f"env_spec.feedback_type={spec.feedback_type} is invalid with "
                          "policy=scripted: the scripted policy follows fp feedback only; set "
                          "env_spec.feedback_type=fp")
    if spec.name == text_housekeep.LLF_ENV_ID:
        if spec.single_task is not None:
            raise ConfigError("env_spec.single_task is for llf-crafter-v0; Housekeep's task is "
                              "always the whole tidy-up")
        try:
            count = episode_count(spec.housekeep_task)
        except HousekeepDataError as err:
            raise ConfigError(f"env_spec.housekeep_task={spec.housekeep_task!r}: {err}") from None
        if spec.housekeep_ep_num is not None and spec.housekeep_ep_num >= count:
            raise ConfigError(f"env_spec.housekeep_ep_num={spec.housekeep_ep_num} is invalid: "
                              f"scene {spec.housekeep_task} has {count} episodes")
    if opts.policy == "llm":
        check_lm_spec(cfg.env_spec.lm_spec)
    return opts, spec


def make_env(spec: LLFEnvOptions) -> gym.Env:
    kinds = {"instruction_type": spec.instruction_type, "feedback_type": spec.feedback_type}
    if spec.name == text_crafter.LLF_ENV_ID:
        return gym.make(spec.name, task=spec.single_task, version=spec.version,
                        length=spec.length, dying=spec.dying, **kinds)
    return gym.make(spec.name, task=spec.housekeep_task, ep_num=spec.housekeep_ep_num,
                    length=spec.housekeep_length, **kinds)


class LLFRun:
    """One language-feedback run; ``run()`` plays it and returns the evaluation's metrics."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path):
        self.cfg = cfg
        self.opts, self.spec = validate(cfg)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.game: Game = game_named(GAMES[self.spec.name])
        self.env = make_env(self.spec)
        self.client = None
        if self.opts.policy == "llm":
            self.client = build_client(cfg.env_spec.lm_spec)
            self.policy: Any = LLMPolicy(self.client, history=self.opts.history)
        elif self.opts.policy == "scripted":
            self.policy = ScriptedPolicy()
        else:
            self.policy = RandomPolicy(self.opts.seed)
        write_record(self.run_dir, self.record())
        self.logger = Logger(self.run_dir)
        self.stats = StatsWriter(self.run_dir / "eval" / "stats.jsonl")
        self.frame = self.episode = 0
        self.pace = EverySeconds(self.opts.progress_every_s)

    def record(self) -> dict[str, Any]:
        config = run_config(self.cfg, self.client)
        return {"method": METHODS[self.opts.policy], "game": self.game.name,
                "ellm_version": ellm.__version__, **config, "num_train_frames": 0}

    def run(self) -> dict[str, float]:
        episodes = []
        for k in range(self.opts.num_episodes):
            stats = self._episode(self.opts.seed + k)
            episodes.append(stats)
            log.info("episode %d/%d: %s", k + 1, self.opts.num_episodes, self._describe(stats))
        metrics = self._eval_metrics(episodes)
        self.logger.log(metrics, 0)
        self.logger.close()
        self.env.close()
        return metrics

    def _episode(self, seed: int) -> dict[str, float]:
        obs, _ = self.env.reset(seed=seed)
        self.policy.reset(obs, self.env.unwrapped.actions)
        before = self.policy.metrics()
        start, total, invalid, steps = time.monotonic(), 0.0, 0, 0
        while True:
            obs, reward, terminated, truncated, info = self.env.step(self.policy.act(obs))
            self.frame += 1
            steps += 1
            total += reward
            invalid += not info["valid_action"]
            if terminated or truncated:
                break
            if self.pace():  # an LLM answers each step: an episode can take minutes
                log.info("episode %d/%d: step %d, return %.2f so far (%s)%s", self.episode + 1,
                         self.opts.num_episodes, steps, total, duration(time.monotonic() - start),
                         self._lm_so_far())
        stats = {**info["episode_stats"], "success": int(info["success"]), "seed": seed,
                 "frame": 0}
        self.stats.write(stats)
        after = self.policy.metrics()
        self.episode += 1
        row = {"llf/episode": self.episode, "llf/return": total, "llf/success": float(info["success"]),
               "llf/length": stats["length"], "llf/invalid_actions": invalid,
               "llf/seconds": time.monotonic() - start,
               "llf/fallbacks": after.get("fallbacks", 0.0) - before.get("fallbacks", 0.0)}
        if self.game.report.scores_achievements:
            row["llf/achievements"] = achievements_unlocked(stats)
        if self.client is not None:
            row.update({f"llf/{k}": after[k] - before[k] for k in _LM_PER_EPISODE})
            calls = after["api_calls"] - before["api_calls"]
            seconds = after["latency_s"] * after["api_calls"] - before["latency_s"] * before[
                "api_calls"]
            row["llf/latency_s"] = seconds / calls if calls else 0.0
            row.update({f"lm/{k}": v for k, v in after.items() if k != "fallbacks"})
        self.logger.log(row, self.frame)
        return stats

    def _eval_metrics(self, episodes: Sequence[Mapping[str, float]]) -> dict[str, float]:
        metrics = {
            "eval/success_rate": float(np.mean([ep["success"] for ep in episodes])),
            "eval/episode_length": float(np.mean([ep["length"] for ep in episodes])),
            "eval/return": float(np.mean([ep["reward"] for ep in episodes])),
        }
        if self.game.report.scores_achievements:
            rates = success_rates(episodes)
            metrics.update({
                "eval/episode_reward": float(np.mean([achievements_unlocked(ep)
                                                      for ep in episodes])),
                "eval/score": crafter_score(rates),
                **{f"achievements/{name}": rate for name, rate in rates.items()}})
        else:
            metrics["eval/episode_reward"] = metrics["eval/return"]
            metrics.update({f"{self.game.name}/{k}": float(np.mean([ep[k] for ep in episodes]))
                            for k in STAT_KEYS})
        return metrics

    def _describe(self, stats: Mapping[str, float]) -> str:
        words = f"success {'yes' if stats['success'] else 'no'}, {stats['length']} steps"
        if self.game.report.scores_achievements:
            words += f", {achievements_unlocked(stats)} achievements"
        else:
            words += f", rearrange success {stats['rearrange_success']:.2f}"
        return words + self._lm_so_far()

    def _lm_so_far(self) -> str:
        if self.client is None:
            return ""
        m = self.client.metrics()
        return (f"; LM so far: {m['api_calls']:.0f} calls ({m['latency_s']:.1f} s each), "
                f"{m['cache_hits']:.0f} cache hits, {m['parse_errors']:.0f} unparsable answers")

    def closing_message(self, metrics: Mapping[str, float]) -> str:
        n = self.opts.num_episodes
        played = (f"Played {n} episode{'s' * (n != 1)} of {self.spec.name} with the "
                  f"{self.opts.policy} policy (feedback {self.spec.feedback_type}): success "
                  f"rate {metrics['eval/success_rate']:.2f}, {self.game.describe(metrics)}.")
        return "\n".join([played, *run_dir_lines(self.run_dir)])


CONFIG = Path(__file__).parent / "conf" / "llf.yaml"


def main() -> None:
    hydra_entry(LLFRun, CONFIG)
