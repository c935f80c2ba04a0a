"""A code-as-policy run (``python -m llm_in_the_loop.code_policy_run [key=value ...]``, config
``conf/code_policy.yaml``); the loop and the run directory are in docs/optimizers.md."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

import ellm
from ellm.errors import ConfigError
from ellm.lm import build_client
from ellm.loop.timing import EverySeconds, duration
from ellm.run.command_line import hydra_entry, run_dir_lines, write_record
from ellm.run.config import check_lm_spec, run_config
from ellm.run.logger import Logger
from ellm.run.schema import integer, is_num, non_negative, one_of, parse, valid
from llm_in_the_loop.code_policy.sandbox import ISOLATIONS, Sandbox
from llm_in_the_loop.code_policy.sandbox.bwrap import problem as sandbox_problem
from llm_in_the_loop.code_policy.targets import (
    CodeTarget,
    CrafterTarget,
    EpisodeRecord,
    LLFMetaWorldTarget,
    MetaWorldTarget,
    Move,
    Policy,
    feedback_text,
    sandboxed,
    step_feedback,
)
from llm_in_the_loop.lm_usage import LMUsage, lm_summary, namespaced
from text_crafter.tasks import SINGLE_TASKS
from text_game.llf import FEEDBACK_TYPES

log = logging.getLogger(__name__)
METAWORLD, LLF_METAWORLD = "metaworld-pick-place-v3", "llf-metaworld-pick-place-v2"
ENVS = (METAWORLD, LLF_METAWORLD, "llf-crafter-v0")
SEED_STRIDE, EVAL_OFFSET = 1_000_000, 500_000  # as in policy search
STATUSES = ("updated", "kept", "unparsable", "no_answer")


@dataclass(frozen=True)
class CodeOptions:

    optimizer: str = one_of("llm", "random", "expert")
    optimize_every: str = one_of("rollout", "step")
    seed: int = integer(0)
    iterations: int = integer(1)
    eval_every: int = integer(0)
    num_eval_episodes: int = integer(0)
    feedback_steps: int = integer(0)
    memory_size: int = integer(0)
    code_timeout: float = valid("a number > 0", lambda v: is_num(v) and v > 0)
    code_memory_mb: int = integer(256)
    sandbox: str = one_of(*ISOLATIONS)
    progress_every_s: float = non_negative()


@dataclass(frozen=True)
class CodeEnvOptions:

    name: str = one_of(*ENVS)
    horizon: int = integer(1)
    substeps: int = integer(1)
    single_task: str = one_of(*SINGLE_TASKS)
    feedback_type: str = one_of(*FEEDBACK_TYPES)
    length: int = integer(1)
    version: int = one_of(1, 2)


def validate(cfg: DictConfig) -> tuple[CodeOptions, CodeEnvOptions]:
    """Check the config once; a :class:`ConfigError` names the key."""
    opts = parse(CodeOptions, cfg)
    spec = parse(CodeEnvOptions, cfg.env_spec, "env_spec.")
    if spec.name == METAWORLD and spec.horizon * spec.substeps > 500:
        raise ConfigError(f"env_spec.horizon * env_spec.substeps = {spec.horizon * spec.substeps}"
                          " is more than Meta-World's 500 simulator steps per episode")
    if opts.optimizer == "expert" and spec.name not in (METAWORLD, LLF_METAWORLD):
        raise ConfigError(f"optimizer=expert is for {METAWORLD} and {LLF_METAWORLD}; on "
                          "llf-crafter-v0 the feedback-following reference is `python -m "
                          "llm_in_the_loop.llf_run policy=scripted`")
    if opts.optimize_every == "step" and opts.optimizer != "llm":
        raise ConfigError(f"optimize_every=step takes an OptoPrime step per env step, so it "
                          f"needs optimizer=llm (optimizer={opts.optimizer} optimises nothing)")
    if spec.name == LLF_METAWORLD and spec.feedback_type == "fn":
        raise ConfigError(f"env_spec.feedback_type=fn: {LLF_METAWORLD} gives r, hp, hn, fp "
                          "(and a, m, n), as LLF-Bench's Meta-World does")
    if opts.optimizer == "llm":
        check_lm_spec(cfg.env_spec.lm_spec)
        if opts.sandbox == "os" and (problem := sandbox_problem()) is not None:
            raise ConfigError(f"sandbox=os: {problem}. Code as policy runs the model's code only "
                              "in the sandbox; sandbox=none runs it without OS isolation (only "
                              "for models you trust)")
    return opts, spec


def make_target(opts: CodeOptions, spec: CodeEnvOptions) -> CodeTarget:
    if spec.name == METAWORLD:
        return MetaWorldTarget(spec.horizon, spec.substeps, opts.seed)
    if spec.name == LLF_METAWORLD:
        return LLFMetaWorldTarget(spec.horizon, spec.feedback_type)
    return CrafterTarget(spec.single_task, spec.length, spec.version, spec.feedback_type)


class CodePolicyRun:
    """One code-as-policy run; ``run()`` plays it and returns the last evaluation's metrics."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path) -> None:
        self.cfg = cfg
        self.opts, self.spec = validate(cfg)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.target = make_target(self.opts, self.spec)
        self.rng = np.random.default_rng(self.opts.seed)
        self.sandbox = (Sandbox(self.opts.code_timeout, self.opts.code_memory_mb,
                                self.opts.sandbox) if self.opts.optimizer == "llm" else None)
        self.client = self.learner = None
        self.last: EpisodeRecord | None = None
        self.obs: Any = None            # optimize_every=step: the observation the code answers
        self.move: Move | None = None   # ... and what its answer did
        self.optimizer_steps = 0
        if self.opts.optimizer == "llm":
            try:
                from llm_in_the_loop.code_policy.optoprime import CodeOptimizer
            except ImportError as err:
                raise ConfigError(f"optimizer=llm needs Trace (trace-opt): pip install -e "
                                  f"'.[optim]' && pip install --no-deps "
                                  f"'trace-opt>=0.1.3.8,<0.2' ({err})") from None
            self.client = build_client(cfg.env_spec.lm_spec)
            by_step = self.opts.optimize_every == "step"
            self.learner = CodeOptimizer(self.client, self.target.initial_code,
                                         self.target.entry, self.target.objective,
                                         self._step_code if by_step else self._play_code,
                                         self.opts.memory_size, self.opts.optimize_every)
        self.usage = LMUsage(self.client)
        self.counts: Counter[str] = Counter()
        write_record(self.run_dir, self.record())
        self.logger = Logger(self.run_dir)
        self.frame = self.episodes = 0
        self.pace = EverySeconds(self.opts.progress_every_s)

    def record(self) -> dict[str, Any]:
        config = run_config(self.cfg, self.client)
        if self.spec.name != "llf-crafter-v0":
            config["env_spec"]["single_task"] = None  # not a Crafter run
        label = {"random": "Random actions (code-policy reference)",
                 "expert": "Scripted expert (code-policy reference)"}.get(
            self.opts.optimizer, f"Code as policy (OptoPrime), LLM "
                                 f"{self.client.spec.lm if self.client else ''}")
        return {"method": f"code-policy-{self.opts.optimizer}", "method_label": label,
                "game": self.target.game, "game_label": self.target.game_label,
                "uses_lm": self.client is not None, "ellm_version": ellm.__version__,
                **config, "num_train_episodes": self.opts.iterations}

    def _seed(self, eval_episode: int | None = None) -> int:
        base = self.opts.seed * SEED_STRIDE
        return base + (self.episodes if eval_episode is None else EVAL_OFFSET + eval_episode)

    def _policy(self, code: str | None) -> tuple[Policy, str | None]:
        """The policy to play: the code in the sandbox, or a reference; and a load error."""
        if self.opts.optimizer == "random":
            return self.target.random(self.rng), None
        if self.opts.optimizer == "expert":
            return self.target.expert(), None
        assert self.sandbox is not None  # optimizer=llm
        loaded = self.sandbox.load(code or "", self.target.entry)
        return sandboxed(self.sandbox), loaded.error

    def _play(self, code: str | None, seed: int) -> EpisodeRecord:
        policy, error = self._policy(code)
        if error is not None:
            return EpisodeRecord(error=error)
        return self.target.rollout(policy, seed)

    def _play_code(self, code: str) -> str:
        """The traced operation's body: a training rollout of ``code``; its summary."""
        self.last = self._play(code, self._seed())
        return self.last.summary()

    def run(self) -> dict[str, float]:
        o = self.opts
        with (self.run_dir / "codes.jsonl").open("a") as codes:
            for i in range(1, o.iterations + 1):
                self._iteration(i, codes)
                if o.eval_every and i % o.eval_every == 0 and i < o.iterations:
                    self.evaluate()
        metrics = self.evaluate()
        if self.learner is not None:
            (self.run_dir / "policy.py").write_text(self.learner.source)
        self.logger.close()
        if self.sandbox is not None:
            self.sandbox.close()
        self.target.close()
        return metrics

    def _step_code(self, code: str) -> str:
        """optimize_every=step: the traced operation's body, one env step of ``code``."""
        policy, error = self._policy(code)
        action, error = (None, error) if error is not None else policy(self.obs)
        self.move = (Move(None, error=error) if error is not None
                     else self.target.step(self.obs, action))
        if self.move.record is None:
            return f"the code failed: {self.move.error}"
        return f"played {self.move.record.action}; reward {self.move.reward:.2f}"

    def _optimise(self, codes: Any, i: int, output: Any, feedback: str, summary: str,
                  code: str | None) -> str:
        """One OptoPrime step, written to codes.jsonl; its status."""
        step = self.learner.step(output, feedback)
        self.optimizer_steps += 1
        codes.write(json.dumps({"iteration": i, "optimizer_step": self.optimizer_steps,
                                "code": code, "summary": summary, "feedback": feedback,
                                "status": step.status, "answer": step.answer}) + "\n")
        codes.flush()
        return step.status

    def _step_episode(self, i: int, codes: Any, statuses: Counter[str]) -> tuple[EpisodeRecord, int]:
        """optimize_every=step: one episode with an OptoPrime step after each env step or
        failure, at most twice the episode's length of them, as the notebook bounds it."""
        out, failures = EpisodeRecord(), 0
        self.obs = self.target.reset(self._seed())
        for _ in range(2 * self.target.length):
            code, obs = self.learner.source, self.obs
            output = self.learner.play()
            move = self.move
            assert move is not None  # set by _step_code
            if move.record is None:
                failures += 1
            else:
                out.steps.append(move.record)
                out.ret += move.reward
                out.success = out.success or move.success
                self.obs = move.obs
            summary = f"step {len(out.steps)}: " + str(output.data)
            statuses[self._optimise(codes, i, output, step_feedback(obs, move), summary,
                                    code)] += 1
            if move.done:
                break
        return out, failures

    def _iteration(self, i: int, codes: Any) -> None:
        start = time.monotonic()
        code = self.learner.source if self.learner else None
        statuses: Counter[str] = Counter()
        if self.learner is None:
            rollout = self._play(None, self._seed())
            failures = int(rollout.error is not None)
            statuses[self.opts.optimizer] += 1
            codes.write(json.dumps({"iteration": i, "code": code, "summary": rollout.summary(),
                                    "feedback": feedback_text(rollout, self.opts.feedback_steps)
                                    }) + "\n")
        elif self.opts.optimize_every == "rollout":
            output = self.learner.play()
            rollout = self.last
            failures = int(rollout.error is not None)
            feedback = feedback_text(rollout, self.opts.feedback_steps)
            statuses[self._optimise(codes, i, output, feedback, rollout.summary(), code)] += 1
        else:
            rollout, failures = self._step_episode(i, codes, statuses)
        self.counts.update(statuses)
        self.episodes += 1
        self.frame += len(rollout.steps)
        row = {"iteration": i, "episodes": self.episodes, "return": rollout.ret,
               "success": float(rollout.success), "steps": len(rollout.steps),
               "code_error": failures, "optimizer_steps": sum(statuses[s] for s in STATUSES),
               **{s: statuses[s] for s in STATUSES},
               "code_chars": len(code or ""), "seconds": time.monotonic() - start,
               **self.usage.step()}
        self.logger.log({**namespaced("iteration", row), **self.usage.totals()}, self.frame)
        shown = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()) if k in STATUSES)
        log.info("iteration %d/%d: %s%s", i, self.opts.iterations, rollout.summary(),
                 f" [{shown}]" if shown else "")

    def evaluate(self) -> dict[str, float]:
        """Play the current policy on the evaluation worlds (no update); log the means."""
        code, rollouts = self.learner.source if self.learner else None, []
        for j in range(self.opts.num_eval_episodes):
            rollouts.append(self._play(code, self._seed(j)))
            if self.pace():  # each iteration logs its own line; an evaluation is many rollouts
                log.info("evaluation after %d iterations: episode %d/%d; %s of wall time",
                         self.episodes, j + 1, self.opts.num_eval_episodes,
                         duration(self.pace.elapsed()))
        returns = [r.ret for r in rollouts] or [float("nan")]
        row = {"episodes": self.episodes, "return": float(np.mean(returns)),
               "return_std": float(np.std(returns)),
               "success_rate": float(np.mean([r.success for r in rollouts] or [0.0])),
               "episode_length": float(np.mean([len(r.steps) for r in rollouts] or [0.0])),
               "code_errors": float(sum(r.error is not None for r in rollouts))}
        self.logger.log(namespaced("eval", row), self.frame)
        log.info("evaluation after %d iterations: return %.2f +- %.2f, success rate %.2f over "
                 "%d episodes", self.episodes, row["return"], row["return_std"],
                 row["success_rate"], len(rollouts))
        return row

    def closing_message(self, metrics: dict[str, float]) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        steps = (f", {self.optimizer_steps} OptoPrime steps (one per "
                 f"{self.opts.optimize_every})" if self.learner else "")
        played = (f"Played {self.opts.iterations} rollouts on {self.spec.name} with the "
                  f"{self.opts.optimizer} optimizer ({counts}{steps}); last evaluation over "
                  f"{self.opts.num_eval_episodes} episodes: return {metrics['return']:.2f} +- "
                  f"{metrics['return_std']:.2f}, success rate {metrics['success_rate']:.2f}.")
        lines = [played]
        if self.client is not None:
            lines.append(f"{lm_summary(self.client)}; the final code is in "
                         f"{self.run_dir / 'policy.py'}.")
        return "\n".join(lines + run_dir_lines(self.run_dir))


CONFIG = Path(__file__).parent / "conf" / "code_policy.yaml"


def main() -> None:
    hydra_entry(CodePolicyRun, CONFIG)
