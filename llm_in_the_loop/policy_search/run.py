"""A policy-search run (``python -m llm_in_the_loop.policy_search_run [key=value ...]``, config
``conf/policy_search.yaml``); the loop and the run directory are in docs/optimizers.md."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

import ellm
from ellm.errors import ConfigError
from ellm.lm import build_client
from ellm.loop.timing import EverySeconds, duration
from ellm.run.command_line import hydra_entry, run_dir_lines, write_json, write_record
from ellm.run.config import check_lm_spec, run_config
from ellm.run.logger import Logger
from ellm.run.schema import boolean, integer, is_int, is_num, non_negative, one_of, parse, valid
from llm_in_the_loop.lm_usage import LMUsage, lm_summary, namespaced
from llm_in_the_loop.policy_search.parameterised_policies import (
    CrafterForagerTask,
    EpisodeResult,
    GymLinearTask,
    SearchTask,
)
from llm_in_the_loop.policy_search.parameters import Entry, ParameterBuffer, ParameterSpace
from llm_in_the_loop.policy_search.proposers import (
    FALLBACK_STATUSES,
    PROPOSED_STATUSES,
    LLMProposer,
    Proposal,
    RandomProposer,
)
from llm_in_the_loop.policy_search.tutorial_prompt import TEMPLATE, TutorialPrompt, check_template

log = logging.getLogger(__name__)
ENVS = ("MountainCarContinuous-v0", "CartPole-v1", "llf-crafter-v0")
DEFAULT_RANGE = {"MountainCarContinuous-v0": (-6.0, 6.0), "CartPole-v1": (-6.0, 6.0),
                 "llf-crafter-v0": (0.0, 10.0)}
DEFAULT_TASK = "make wood pickaxe"
# Evaluation plays the same worlds each time, apart from training's (docs/optimizers.md).
SEED_STRIDE, EVAL_OFFSET = 1_000_000, 500_000


def _range(v: Any) -> bool:
    return v is None or (len(v) == 2 and all(is_num(x) for x in v) and v[0] < v[1])


@dataclass(frozen=True)
class SearchOptions:

    optimizer: str = one_of("llm", "random")
    seed: int = integer(0)
    iterations: int = integer(0)
    warmup_episodes: int = integer(0)
    episodes_per_iteration: int = integer(1)
    eval_every: int = integer(0)
    num_eval_episodes: int = integer(0)
    step_size: float = valid("a number > 0", lambda v: is_num(v) and v > 0)
    prompt_entries: int = integer(1)
    param_range: tuple[float, float] | None = valid("null or [low, high] with low < high", _range)
    decimals: int = valid("an integer in [0, 6]", lambda v: is_int(v) and 0 <= v <= 6)
    progress_every_s: float = non_negative()
    warmup_range: tuple[float, float] | None = valid("null or [low, high] with low < high",
                                                     _range, None)
    prompt_style: str = one_of("ours", "tutorial", default="ours")
    prompt_template: str | None = valid("null or the path of a text file",
                                        lambda v: v is None or isinstance(v, str), None)
    reasks: int = integer(0, 4)
    clip_proposals: bool = boolean(True)
    eval_each_proposal: bool = boolean(False)


@dataclass(frozen=True)
class SearchEnvOptions:

    name: str = one_of(*ENVS)
    max_episode_steps: int | None = valid("null or an integer >= 1",
                                          lambda v: v is None or (is_int(v) and v >= 1))
    single_task: str | None = one_of(None, DEFAULT_TASK, "place crafting table")
    length: int = integer(1)
    version: int = one_of(1, 2)
    clip_action: bool = boolean(False)


def validate(cfg: DictConfig) -> tuple[SearchOptions, SearchEnvOptions]:
    """Check the config once; a :class:`ConfigError` names the key."""
    opts = parse(SearchOptions, cfg)
    spec = parse(SearchEnvOptions, cfg.env_spec, "env_spec.")
    if spec.single_task is not None and spec.name != "llf-crafter-v0":
        raise ConfigError(f"env_spec.single_task is for llf-crafter-v0, not {spec.name}")
    if opts.warmup_episodes + opts.iterations == 0:
        raise ConfigError("warmup_episodes=0 and iterations=0: nothing to search")
    if spec.clip_action and spec.name != "MountainCarContinuous-v0":
        raise ConfigError(f"env_spec.clip_action is for MountainCarContinuous-v0; the action "
                          f"of {spec.name} is never clipped")
    if opts.warmup_range is not None:
        low, high = search_range(opts, spec)
        if not low <= opts.warmup_range[0] < opts.warmup_range[1] <= high:
            raise ConfigError(f"warmup_range {list(opts.warmup_range)} must lie within the "
                              f"search range [{low:g}, {high:g}] (param_range)")
    if opts.prompt_template is not None and opts.prompt_style != "tutorial":
        raise ConfigError("prompt_template is the template of prompt_style=tutorial; set "
                          "prompt_style=tutorial or prompt_template=null")
    if opts.eval_each_proposal and opts.num_eval_episodes == 0:
        raise ConfigError("eval_each_proposal=true plays each proposal on num_eval_episodes "
                          "evaluation worlds; num_eval_episodes=0 gives it none")
    if opts.optimizer == "llm":
        check_lm_spec(cfg.env_spec.lm_spec)
    return opts, spec


def search_range(opts: SearchOptions, spec: SearchEnvOptions) -> tuple[float, float]:
    """The range of every proposal (the forager's is always [0, 10])."""
    if spec.name == "llf-crafter-v0" or opts.param_range is None:
        return DEFAULT_RANGE[spec.name]
    return float(opts.param_range[0]), float(opts.param_range[1])


def read_template(path: str | None) -> str:
    """The tutorial-style template: ours, or the file at ``path`` (checked: ConfigError)."""
    if path is None:
        return TEMPLATE
    try:
        return check_template(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"prompt_template {path!r}: {err}") from None


def make_task(opts: SearchOptions, spec: SearchEnvOptions) -> SearchTask:
    if spec.name == "llf-crafter-v0":
        return CrafterForagerTask(spec.single_task or DEFAULT_TASK, spec.length, spec.version,
                                  opts.decimals)
    return GymLinearTask(spec.name, *search_range(opts, spec), opts.decimals,
                         spec.max_episode_steps, spec.clip_action)


class PolicySearchRun:
    """One policy-search run; ``run()`` plays it and returns the last evaluation's metrics."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path) -> None:
        self.cfg = cfg
        self.opts, self.spec = validate(cfg)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.task = make_task(self.opts, self.spec)
        if self.opts.param_range is not None and self.spec.name == "llf-crafter-v0":
            log.warning("param_range is ignored on llf-crafter-v0: the forager's parameters "
                        "lie in [0, 10]")
        self.rng = np.random.default_rng(self.opts.seed)
        self.client = None
        o, space = self.opts, self.task.space
        warmup = None if o.warmup_range is None else ParameterSpace(
            space.names, float(o.warmup_range[0]), float(o.warmup_range[1]), space.decimals)
        if o.optimizer == "llm":
            tutorial = None if o.prompt_style == "ours" else TutorialPrompt(
                space, o.step_size, o.iterations, o.prompt_entries,
                read_template(o.prompt_template))
            self.client = build_client(cfg.env_spec.lm_spec)
            self.proposer: RandomProposer = LLMProposer(
                self.client, space, self.rng, task=self.task.description, step=o.step_size,
                prompt_entries=o.prompt_entries, iterations=o.iterations, warmup=warmup,
                tutorial=tutorial, reasks=o.reasks, clip=o.clip_proposals)
        else:
            self.proposer = RandomProposer(space, self.rng, warmup)
        self.reasks = 0
        self.buffer = ParameterBuffer(self.task.space)
        self.statuses: list[str] = []  # each buffer entry's proposal status
        self.usage = LMUsage(self.client)
        write_record(self.run_dir, self.record())
        self.logger = Logger(self.run_dir)
        self.frame = self.episodes = 0
        self.pace = EverySeconds(self.opts.progress_every_s)

    @property
    def num_train_episodes(self) -> int:
        o = self.opts
        return o.warmup_episodes + o.iterations * o.episodes_per_iteration

    def record(self) -> dict[str, Any]:
        config = run_config(self.cfg, self.client)
        if self.spec.name == "llf-crafter-v0":
            config["env_spec"]["single_task"] = self.task.task
        label = ("Policy search, random settings" if self.client is None
                 else f"Policy search, LLM {self.client.spec.lm}")
        return {"method": f"policy-search-{self.opts.optimizer}", "method_label": label,
                "game": self.task.game, "game_label": self.task.game_label,
                "uses_lm": self.client is not None,
                "ellm_version": ellm.__version__, **config,
                "num_train_episodes": self.num_train_episodes}

    def run(self) -> dict[str, float]:
        o = self.opts
        with (self.run_dir / "proposals.jsonl").open("a") as proposals:
            for _ in range(o.warmup_episodes):
                self._try(self.proposer.draw("warmup"), 0, proposals)
            for i in range(1, o.iterations + 1):
                proposal = self.proposer.propose(self.buffer, i)
                self._try(proposal, i, proposals)
                if o.eval_every and i % o.eval_every == 0 and i < o.iterations:
                    self.evaluate()
        metrics = self.evaluate()
        best = self.buffer.best
        own = self.best_proposed
        write_json(self.run_dir / "best.json", {
            "params": dict(zip(self.task.space.names, best.params)), "return": best.ret,
            "status": self.statuses[best.order], "counts": dict(self.proposer.counts),
            "reasks": self.reasks,
            "best_proposed": None if own is None else {
                "params": dict(zip(self.task.space.names, own.params)), "return": own.ret}})
        self.logger.close()
        self.task.close()
        return metrics

    def _try(self, proposal: Proposal, iteration: int, proposals: Any) -> None:
        lm = self.usage.step()
        start = time.monotonic()
        results = []
        for _ in range(self.opts.episodes_per_iteration):
            seed = self.opts.seed * SEED_STRIDE + self.episodes
            results.append(self.task.episode(proposal.params, seed))
            self.episodes += 1
            self.frame += results[-1].steps
            if self.pace():  # the warm-up logs no proposals: say how far it got
                self._progress("warm-up" if iteration == 0
                               else f"proposal {iteration}/{self.opts.iterations}")
        ret = float(np.mean([r.ret for r in results]))
        self.buffer.add(proposal.params, ret)
        self.statuses.append(proposal.status)
        self.reasks += proposal.reasks
        row = {"iteration": iteration, "episodes": self.episodes, "return": ret,
               "success": float(np.mean([r.success for r in results])),
               "steps": float(np.mean([r.steps for r in results])),
               "warmup": float(proposal.status == "warmup"),
               "fallback": float(proposal.status in FALLBACK_STATUSES),
               "clipped": float(proposal.status == "clipped"),
               "out_of_range": float(proposal.status == "out_of_range"),
               "reasks": float(proposal.reasks),
               "best_return": self.buffer.best.ret, "seconds": time.monotonic() - start,
               **{f"param_{n}": v for n, v in zip(self.task.space.names, proposal.params)},
               **lm}
        if iteration and self.opts.eval_each_proposal:
            # As the tutorial: the newest setting evaluated, its episodes kept out of the buffer.
            evaluated = self._evaluation_episodes(proposal.params, f"proposal {iteration}")
            row.update(eval_return=float(np.mean([r.ret for r in evaluated])),
                       eval_return_std=float(np.std([r.ret for r in evaluated])),
                       eval_success_rate=float(np.mean([r.success for r in evaluated])))
        self.logger.log({**namespaced("iteration", row), **self.usage.totals()}, self.frame)
        proposals.write(json.dumps({"iteration": iteration, "status": proposal.status,
                                    "params": list(proposal.params), "return": ret,
                                    "answer": proposal.answer}, allow_nan=False) + "\n")
        proposals.flush()
        if iteration:
            note = (f"; evaluated {row['eval_return']:.2f} over "
                    f"{self.opts.num_eval_episodes} episodes" if "eval_return" in row else "")
            log.info("proposal %d/%d [%s] %s -> return %.2f (best %.2f)%s", iteration,
                     self.opts.iterations, proposal.status,
                     self.task.space.format(proposal.params), ret, self.buffer.best.ret, note)

    def _progress(self, doing: str) -> None:
        best = self.buffer.best
        log.info("%d/%d training episodes played (%s), best return so far %s; %s of wall time",
                 self.episodes, self.num_train_episodes, doing,
                 "none yet" if best is None else f"{best.ret:.2f}", duration(self.pace.elapsed()))

    def _evaluation_episodes(self, params: tuple[float, ...], what: str) -> list[EpisodeResult]:
        results = []
        for j in range(self.opts.num_eval_episodes):
            results.append(self.task.episode(params,
                                             self.opts.seed * SEED_STRIDE + EVAL_OFFSET + j))
            if self.pace():
                self._progress(f"{what}: evaluation episode {j + 1}/{self.opts.num_eval_episodes}")
        return results

    def evaluate(self) -> dict[str, float]:
        """Play the best setting so far on the evaluation worlds; log and return the means."""
        best = self.buffer.best
        results = self._evaluation_episodes(best.params, "best setting")
        returns = [r.ret for r in results] or [float("nan")]
        row = {"episodes": self.episodes, "return": float(np.mean(returns)),
               "return_std": float(np.std(returns)),
               "success_rate": float(np.mean([r.success for r in results])) if results else 0.0,
               "episode_length": float(np.mean([r.steps for r in results])) if results else 0.0,
               **{f"param_{n}": v for n, v in zip(self.task.space.names, best.params)}}
        self.logger.log(namespaced("eval", row), self.frame)
        log.info("evaluation after %d episodes: %s -> return %.2f +- %.2f over %d episodes",
                 self.episodes, self.task.space.format(best.params), row["return"],
                 row["return_std"], len(results))
        return row

    @property
    def best_proposed(self) -> Entry | None:
        """The best setting the model itself proposed (not a warm-up or fallback draw)."""
        own = [e for e in self.buffer.entries if self.statuses[e.order] in PROPOSED_STATUSES]
        return max(own, key=lambda e: (e.ret, -e.order), default=None)

    def closing_message(self, metrics: dict[str, float]) -> str:
        best = self.buffer.best
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.proposer.counts.items()))
        tried = (f"Tried {len(self.buffer)} settings on {self.spec.name} with the "
                 f"{self.opts.optimizer} optimizer ({counts}; {self.reasks} re-asks).")
        found = (f"Best: {self.task.space.format(best.params)}, return {best.ret:.2f}; "
                 f"evaluated on {self.opts.num_eval_episodes} episodes: "
                 f"{metrics['return']:.2f} +- {metrics['return_std']:.2f}, success rate "
                 f"{metrics['success_rate']:.2f}.")
        lines = [tried, found]
        own = self.best_proposed
        if own is not None and own is not best:
            lines.append(f"(found by a {self.statuses[best.order]} draw; the best setting the "
                         f"model proposed: {self.task.space.format(own.params)}, return "
                         f"{own.ret:.2f})")
        if self.client is not None:
            lines.append(f"{lm_summary(self.client)}.")
        return "\n".join(lines + run_dir_lines(self.run_dir))


CONFIG = Path(__file__).parent / "conf" / "policy_search.yaml"


def main() -> None:
    hydra_entry(PolicySearchRun, CONFIG)
