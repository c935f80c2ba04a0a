"""The training loop: one Workspace for pretraining, finetuning and guided exploration.

Built from the Hydra config (see ``config.yaml``) for the method ``method`` names
(:mod:`ellm.methods`) on the game ``env_spec.name`` names (:mod:`ellm.games`), it owns the
rollout (env, goal source, per-step rewards: :mod:`ellm.rollout`), the replay storage and
loader, the agent, the evaluator, the logger and the checkpoints:

    seed frames (random actions) -> every step: one rollout step (act, env step, reward against
    the previous state's goals, new goals), store -> one update every ``update_every_steps`` ->
    every ``eval_every_frames``: evaluate and snapshot.
"""

from __future__ import annotations

import functools
import logging
import random
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from omegaconf import DictConfig
from tqdm.contrib.logging import logging_redirect_tqdm

import ellm
from ellm import checkpoint
from ellm.config import (
    agent_target,
    resolve_device,
    resolve_threads,
    resolve_workers,
    run_config,
    validate,
)
from ellm.entry import write_record
from ellm.evaluate import DIAGNOSTICS, Evaluator
from ellm.frames import FRAME_SIZE, paper_gray84, to_gray84
from ellm.games import EpisodeCounted
from ellm.goals import NoGoals
from ellm.inputs import AgentInputs
from ellm.logger import Logger
from ellm.methods import resolve_method
from ellm.replay import ReplayStorage, StringTable, make_replay_loader
from ellm.reward import GameReward, StepReward
from ellm.rollout import Rollout, Step
from ellm.timing import Progress, Timer

log = logging.getLogger(__name__)


@dataclass
class Episode:
    """What the loop keeps of the training episode in progress (the rollout keeps the rest)."""

    timer: Timer = field(default_factory=Timer)
    updates: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


class Workspace:
    """Everything one training run needs; ``train()`` runs it."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path):
        self.game = validate(cfg)
        self.cfg = cfg
        self.method = resolve_method(cfg, self.game)
        self.device = resolve_device(cfg.device)
        resuming = bool(cfg.snapshot_path) and not cfg.finetune_snapshot
        snapshot = checkpoint.load(cfg.snapshot_path) if cfg.snapshot_path else None
        self.paper = self.game.paper_setting(cfg)  # docs/fidelity.md
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(resolve_threads(cfg.torch_threads))
        log.info("%s on %s; device: %s (asked: %s); torch threads: %d; run dir: %s",
                 self.method.name, cfg.env_spec.name, self.device, cfg.device,
                 torch.get_num_threads(), self.run_dir)
        _seed_everything(cfg.seed)
        # A resumed run drops the episodes a killed run logged after its snapshot.
        keep = int(snapshot[1]["frame"]) if snapshot is not None and resuming else None
        self._build_rollouts(keep)
        self._build_replay()
        self.agent = self._make_agent(hold_epsilon=cfg.decay_after_reward)
        self.frame = self.episode = 0
        # train_after_reward / decay_after_reward wait, as the original, until the rewards
        # summed over the run reach 1 (first_reward_frame is when they did).
        self.cumulative_reward = 0.0
        self.first_reward_frame: int | None = None
        if snapshot is not None and resuming:
            self._restore(*snapshot)
        elif snapshot is not None:
            self.agent.load_weights(snapshot[0])
            log.info("finetuning: loaded network weights from %s", cfg.snapshot_path)
        if cfg.expl_agent_path:
            guide = self._make_agent(hold_epsilon=False)
            guide.load_weights(checkpoint.load(cfg.expl_agent_path, "expl_agent_path")[0])
            self.agent.set_exploration_agent(guide)
            log.info("guided exploration from %s (other_model_prob=%s)",
                     cfg.expl_agent_path, cfg.other_model_prob)

        write_record(self.run_dir, self.record())
        self.logger = Logger(
            self.run_dir, use_tb=cfg.use_tb, use_wandb=cfg.use_wandb,
            wandb_config=self.record(), wandb_name=cfg.exp_name, resume_id=cfg.resume_id,
            start_frame=self.frame)
        self.train_stats = self.game.stats_writer(self.run_dir / "train" / "stats.jsonl",
                                                  keep_until=keep)
        self.last_eval: dict[str, float] = {}
        self._lm_logged = self._lm_metrics()  # the lm/ metrics last logged

    def _build_rollouts(self, keep_until: int | None) -> None:
        """The training rollout and the evaluator's, each with its own env and goal source;
        the evaluator scores only the game's goal reward (its intrinsic return)."""
        cfg, game = self.cfg, self.game
        env = game.make_env(cfg, cfg.seed)
        self.inputs = AgentInputs(cfg.use_language_state is not None, cfg.use_goal,
                                  functools.partial(game.goal_text, cfg),
                                  paper_gray84 if self.paper else to_gray84)
        self.embedder = None
        if (cfg.use_goal or cfg.use_language_state is not None
                or (self.method.goal_reward and game.needs_embedder(cfg))):
            from ellm.embed import SentenceEmbedder

            self.embedder = SentenceEmbedder(cfg.sbert_model, device=str(self.device))
        self.goals, rewards = game.goals(cfg, self.embedder, self.method.goal_reward)
        rewards = [*rewards, *self.method.rewards(cfg), *self._game_reward()]
        self.rollout = Rollout(env, self.goals, rewards, self.inputs, cfg.frame_stack)
        eval_env = game.make_env(cfg, cfg.seed + 1)  # the original seeds it with seed + 1
        eval_goals, eval_rewards = game.goals(cfg, self.embedder, self.method.goal_reward)
        eval_rewards += self.method.rewards(cfg)
        self.evaluator = Evaluator(
            Rollout(eval_env, eval_goals, eval_rewards, self.inputs, cfg.frame_stack), game,
            stats_path=self.run_dir / "eval" / "stats.jsonl",
            num_episodes=cfg.num_eval_episodes,
            single_goals=game.single_goals(cfg) if cfg.single_goal_eval else (),
            goal_rollout=Rollout(eval_env, NoGoals(), [], self.inputs, cfg.frame_stack),
            sources=[self.goals, eval_goals], keep_until=keep_until)
        self.eval_goals = eval_goals

    def _game_reward(self) -> list[StepReward]:
        weight = self.method.game_weight(self.cfg)
        return [] if weight is None else [GameReward(weight)]

    def _build_replay(self) -> None:
        cfg = self.cfg
        replay_dir = self.run_dir / "buffer"
        self.strings = StringTable(replay_dir / "strings.jsonl")
        self.storage = ReplayStorage(replay_dir, self.strings)
        self.loader = make_replay_loader(
            replay_dir, capacity=cfg.replay_buffer_size, batch_size=cfg.batch_size,
            num_workers=resolve_workers(cfg.replay_buffer_num_workers), nstep=cfg.nstep,
            discount=cfg.discount,
            frame_stack=cfg.frame_stack, clip_reward=cfg.clip_reward,
            save_buffer=cfg.save_buffer, seed=cfg.seed,
            per_episode=self.paper)
        self._batches = None

    @property
    def env(self) -> Any:
        return self.rollout.env

    def record(self) -> dict[str, Any]:
        """What this run is: the resolved config without secrets, its method and game."""
        # The config's own ``method`` key is the group's choice before the original's
        # spellings are read: the record holds the method resolved from both.
        return {**self._config(), "method": self.method.name, "game": self.game.name,
                "ellm_version": ellm.__version__}

    def _config(self) -> dict[str, Any]:
        """The resolved config without secrets, naming the LM model that answers."""
        return run_config(self.cfg, self.goals.answering_client())

    def _make_agent(self, hold_epsilon: bool):
        cfg = self.cfg
        return hydra.utils.instantiate(
            cfg.agent, _target_=agent_target(cfg),
            obs_shape=(cfg.frame_stack, FRAME_SIZE, FRAME_SIZE),
            num_actions=self.env.action_space.n, device=str(self.device),
            embedder=self.embedder, strings=self.strings, discount=cfg.discount,
            nstep=cfg.nstep, hold_epsilon=hold_epsilon, seed=cfg.seed,
            use_extr_rew=cfg.use_extr_rew, paper_setting=self.paper,
            max_text_tokens=cfg.env_spec.max_seq_len)

    # ------------------------------------------------------------------ training
    def train(self) -> dict[str, float]:
        """Train to ``num_train_frames``; returns the last evaluation's metrics. Evaluation
        summaries and the run's wall time go to the log (console and ``train.log``)."""
        cfg, timer, first_frame = self.cfg, Timer(), self.frame
        self.progress = Progress(cfg.num_train_frames, self.frame, cfg.progress,
                                 every=min(10_000, max(100, cfg.num_train_frames // 20)))
        try:
            with logging_redirect_tqdm():  # log lines print above the progress bar
                if self.frame == 0 < cfg.num_train_frames:
                    self._evaluate()  # the untrained agent, as the original evaluates at step 0
                episode = self._start_episode()
                while self.frame < cfg.num_train_frames:
                    step = self._step(episode)
                    if self._should_update():
                        self._update(episode)
                    if step.last:
                        self._end_episode(episode, step.info)
                        episode = self._start_episode()
                    if self._eval_due():
                        self._evaluate()
                self.progress.close()
        finally:
            drained = self._close_lm()
        if drained:
            self.logger.log(drained, self.frame)
        self.logger.close()
        self.wall_time = timer.elapsed()
        log.info("trained frames %d-%d in %.0f s wall time", first_frame, self.frame,
                 self.wall_time)
        return self.last_eval

    def closing_message(self) -> str:
        """The end of a run in words: what was trained, how it did, where it is, what next."""
        lines = [(f"Trained {self.method.name} on {self.cfg.env_spec.name} up to frame {self.frame} "
                  f"({self.wall_time / 60:.1f} min of wall time).")]
        if self.last_eval:
            n = self.cfg.num_eval_episodes
            lines.append(f"Last evaluation ({n} episode{'s' * (n != 1)}): "
                         f"{self.game.describe(self.last_eval)}.")
        lines += [f"Run dir: {self.run_dir}",
                  f"Plot it: python -m ellm.report {self.run_dir}  (writes {self.run_dir / 'report'})"]
        return "\n".join(lines)

    def _start_episode(self) -> Episode:
        first = self.rollout.reset()
        self.storage.add_first(first, self.inputs.text(self.rollout.obs),
                               self.inputs.goal(self.rollout.goals))
        return Episode()

    def _step(self, ep: Episode) -> Step:
        """One rollout step, stored; the frame counters and the reward-triggered schedule."""
        step = self.rollout.step(
            lambda inputs: self.agent.act(inputs, self.frame, eval_mode=False), ep.timer)
        self.storage.add(step.frame, step.action, step.reward, step.info["discount"],
                         self.inputs.text(step.obs), self.inputs.goal(step.goals), step.last,
                         game_reward=step.game_reward)
        self.frame += 1
        self.cumulative_reward += step.reward
        self.progress.update(self.frame)
        if self.first_reward_frame is None and self.cumulative_reward >= 1:
            self.first_reward_frame = self.frame
            if self.agent.start_epsilon_decay(self.frame):
                log.info("rewards reached 1 at frame %d: epsilon starts decaying", self.frame)
        return step

    def _should_update(self) -> bool:
        cfg = self.cfg
        return (self.method.learns and self.frame >= cfg.num_seed_frames
                and self.frame % cfg.agent.update_every_steps == 0
                and self.storage.num_episodes > 0
                and (not cfg.train_after_reward or self.first_reward_frame is not None))

    def _update(self, ep: Episode) -> None:
        with ep.timer("sample"):
            if self._batches is None:
                self._batches = iter(self.loader)
            batch = next(self._batches)
        with ep.timer("update"):
            for key, value in self.agent.update(batch, self.frame).items():
                ep.updates[key].append(value)

    def _end_episode(self, ep: Episode, info: Mapping[str, Any]) -> None:
        self.episode += 1
        stats = info["episode_stats"]
        summary = self.rollout.summary()
        self._lm_logged = self._lm_metrics()
        self.train_stats.write({**stats, "frame": self.frame})
        elapsed = ep.timer.elapsed()
        self.logger.log({
            "train/episode_reward": summary["reward"],
            "train/episode_length": summary["length"],
            "train/game_reward": stats["reward"],
            "train/episode": self.episode,
            "train/fps": summary["length"] / elapsed,
            "train/epsilon": self.agent.epsilon(self.frame),
            "train/buffer_size": self.storage.num_transitions,
            "train/updates": self.agent.num_updates,  # gradient updates so far, cumulative
            **{f"train/{k}": summary[k] for k in DIAGNOSTICS},
            **{f"reward/{k}": summary[k] for k in self.reward_metrics},
            **self.game.episode_metrics(stats),
            **{f"time/{k}": v for k, v in ep.timer.fractions().items()},
            **self._lm_logged,
            **{f"train/{k}": float(np.mean(v)) for k, v in ep.updates.items()},
        }, self.frame)
        kind = "game" if self.method.game_reward else "intrinsic"
        status = f"eps {self.agent.epsilon(self.frame):.3f} | {kind} return {summary['reward']:.2f}"
        if self.last_eval:
            key, label = self.game.headline
            status += f" | last eval {self.last_eval[key]:.2f} {label}"
        self.progress.set_status(status)

    @property
    def reward_metrics(self) -> list[str]:
        """The per-step rewards' episode metrics (e.g. ``goal_matches``)."""
        return [k for r in self.rollout.rewards for k in r.episode_metrics()]

    def _eval_due(self) -> bool:
        every = self.cfg.eval_every_frames
        return self.frame % every == 0 or self.frame >= self.cfg.num_train_frames

    def _evaluate(self) -> None:
        metrics = self.evaluator.run(self.agent, self.frame)
        self._lm_logged = self._lm_metrics()
        self.logger.log({**metrics, **self._lm_logged}, self.frame)
        if metrics:
            self.last_eval = metrics
            log.info(self.game.summary(metrics, self.frame))
        if self.cfg.save_snapshot:
            self.save_snapshot()

    def _lm_metrics(self) -> dict[str, float]:
        """LM counters of the training and evaluation suggesters together (the budget entries
        describe the one process-wide ledger, so they are taken once)."""
        totals = dict(self.goals.metrics())
        for key, value in self.eval_goals.metrics().items():
            if not key.startswith("budget_"):
                totals[key] = totals.get(key, 0.0) + value
        return {f"lm/{k}": v for k, v in totals.items()}

    def _close_lm(self) -> dict[str, float]:
        """Close both suggesters: a non-blocking one lets its requests in flight finish, so
        their answers are cached and counted. Returns the LM metrics when they changed since
        they were last logged (for a last ``lm/`` row), else {}."""
        self.goals.close()
        self.eval_goals.close()
        final = self._lm_metrics()
        return final if final != self._lm_logged else {}

    # ------------------------------------------------------------------ snapshots
    def _seeded_envs(self) -> dict[str, Any]:
        """The envs whose worlds follow (seed, episode number), e.g. Crafter's."""
        envs = {"train": self.env, "eval": self.evaluator.env}
        return {k: e for k, e in envs.items() if isinstance(e, EpisodeCounted)}

    def save_snapshot(self) -> Path:
        meta = {
            "frame": self.frame, "episode": self.episode,
            "first_reward_frame": self.first_reward_frame,
            "cumulative_reward": self.cumulative_reward,
            "method": self.method.name, "game": self.game.name,
            "config": self._config(),
            "versions": {"ellm": ellm.__version__, "torch": str(torch.__version__)},
            "rng": _rng_state(),
            "env_episodes": {name: env.episode_count for name, env in self._seeded_envs().items()},
        }
        return checkpoint.save(self.run_dir / checkpoint.SNAPSHOT_NAME, self.agent.state_dict(), meta)

    def _restore(self, agent_state: dict[str, Any], meta: dict[str, Any]) -> None:
        self.agent.load_state_dict(agent_state)
        self.frame, self.episode = int(meta["frame"]), int(meta["episode"])
        self.first_reward_frame = meta.get("first_reward_frame")
        self.cumulative_reward = float(meta.get("cumulative_reward", 0.0))
        _set_rng_state(meta["rng"])
        for name, env in self._seeded_envs().items():  # new worlds, not the first ones again
            env.episode_count = meta.get("env_episodes", {}).get(name, 0)
        log.info("resumed %s at frame %d (episode %d)", self.cfg.snapshot_path, self.frame,
                 self.episode)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    return {
        "python": list(random.getstate()[1]), "python_pos": random.getstate()[2],
        "numpy": {"keys": np_state[1].tolist(), "pos": int(np_state[2])},
        "torch": torch.get_rng_state(),
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate((3, tuple(state["python"]), state["python_pos"]))
    keys = np.array(state["numpy"]["keys"], dtype=np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy"]["pos"], 0, 0.0))
    torch.set_rng_state(state["torch"])


__all__ = ["Workspace"]
