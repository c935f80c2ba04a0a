"""The training loop: one Workspace for pretraining, finetuning and guided exploration.

Built from the Hydra config (see ``config.yaml``), it owns the environments, the goal source
(LM suggester or single task), the replay storage and loader, the agent, the logger and the
checkpoints, and runs ``train()``:

    seed frames (random actions) -> every step: act, env step, intrinsic reward against the
    previous state's goals, new goals, store -> one update every ``update_every_steps`` ->
    every ``eval_every_frames``: evaluate and snapshot.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

import ellm
from ellm import checkpoint, housekeep_run
from ellm.config import redacted, resolve_device, validate
from ellm.evaluate import Evaluator
from ellm.frames import FRAME_SIZE, FrameStack, to_gray84
from ellm.goals import GoalSource, goal_text
from ellm.lm import build_suggester
from ellm.logger import Logger
from ellm.replay import ReplayStorage, StringTable, make_replay_loader
from ellm.reward import GoalReward, SingleTaskReward
from text_crafter import GOOD_ACTIONS, make
from text_crafter.stats import StatsWriter

log = logging.getLogger(__name__)


def make_env(cfg: DictConfig, seed: int):
    if housekeep_run.is_housekeep(cfg):
        return housekeep_run.make_env(cfg, seed)
    spec = cfg.env_spec
    return make(spec.name, action_space_type=spec.action_space_type, length=spec.length,
                dying=spec.dying, seed=seed)


class Workspace:
    """Everything one training run needs; ``train()`` runs it."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path):
        validate(cfg)
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.device = resolve_device(cfg.device)
        resuming = bool(cfg.snapshot_path) and not cfg.finetune_snapshot
        snapshot = checkpoint.load(cfg.snapshot_path) if cfg.snapshot_path else None
        if cfg.expl_agent_path:
            checkpoint.resolve(cfg.expl_agent_path, "expl_agent_path")
        log.info("device: %s (asked: %s); run dir: %s", self.device, cfg.device, self.run_dir)
        _seed_everything(cfg.seed)

        self.env = make_env(cfg, cfg.seed)
        self.extrinsic = self.env.extrinsic
        needs_text = (cfg.use_goal or cfg.use_language_state is not None
                      or (not self.extrinsic and cfg.env_spec.single_task is None
                          and not housekeep_run.is_housekeep(cfg)))  # its reward needs no SBERT
        self.embedder = None
        if needs_text:
            from ellm.embed import SentenceEmbedder

            self.embedder = SentenceEmbedder(cfg.sbert_model, device=str(self.device))
        self.goals = self._goal_source()
        # A resumed run drops the episodes a killed run logged after its snapshot.
        keep = int(snapshot[1]["frame"]) if snapshot is not None and resuming else None
        housekeep = housekeep_run.is_housekeep(cfg)
        evaluator = housekeep_run.HousekeepEvaluator if housekeep else Evaluator
        self.evaluator = evaluator(self, make_env(cfg, cfg.seed + 10_000), self._goal_source(),
                                   keep_until=keep)

        replay_dir = self.run_dir / "buffer"
        self.strings = StringTable(replay_dir / "strings.jsonl")
        self.storage = ReplayStorage(replay_dir, self.strings)
        self.loader = make_replay_loader(
            replay_dir, capacity=cfg.replay_buffer_size, batch_size=cfg.batch_size,
            num_workers=cfg.replay_buffer_num_workers, nstep=cfg.nstep, discount=cfg.discount,
            frame_stack=cfg.frame_stack, clip_reward=cfg.clip_reward,
            save_buffer=cfg.save_buffer, seed=cfg.seed)
        self._batches = None

        self.agent = self._make_agent(hold_epsilon=cfg.decay_after_reward)
        self.frame = self.episode = 0
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

        (self.run_dir / "config.json").write_text(json.dumps(redacted(cfg), indent=2))
        self.logger = Logger(
            self.run_dir, use_tb=cfg.use_tb, use_wandb=cfg.use_wandb,
            wandb_config=redacted(cfg), wandb_name=cfg.exp_name, resume_id=cfg.resume_id,
            start_frame=self.frame)
        self.train_stats = StatsWriter(self.run_dir / "train" / "stats.jsonl", keep_until=keep)

    # ------------------------------------------------------------------ construction
    def _goal_source(self) -> GoalSource:
        if housekeep_run.is_housekeep(self.cfg):
            return housekeep_run.goal_source(self.cfg)
        spec = self.cfg.env_spec
        suggester = build_suggester(spec.lm_spec, all_goals=GOOD_ACTIONS)
        single = None
        if spec.single_task is not None:
            single = SingleTaskReward(spec.single_task, spec.single_goal_hierarchical)
        reward = None
        if not self.extrinsic and single is None:
            reward = GoalReward(self.embedder, spec.threshold)
        return GoalSource(suggester, reward, single, check_success=spec.check_ac_success)

    def _make_agent(self, hold_epsilon: bool):
        cfg = self.cfg
        return hydra.utils.instantiate(
            cfg.agent, obs_shape=(cfg.frame_stack, FRAME_SIZE, FRAME_SIZE),
            num_actions=self.env.action_space.n, device=str(self.device),
            embedder=self.embedder, strings=self.strings, discount=cfg.discount,
            nstep=cfg.nstep, hold_epsilon=hold_epsilon, seed=cfg.seed,
            use_extr_rew=cfg.use_extr_rew)

    def agent_obs(self, frames: np.ndarray, obs: dict[str, Any], goals: list[str]) -> dict:
        return {"frames": frames, "text_obs": self._text(obs), "goal": self._goal(goals)}

    # ------------------------------------------------------------------ training
    def train(self) -> dict[str, float]:
        """Train to ``num_train_frames``; returns the last evaluation's metrics. Evaluation
        summaries and the run's wall time go to the log (console and ``train.log``)."""
        start, first_frame = time.perf_counter(), self.frame
        with logging_redirect_tqdm():  # log lines print above the progress bar
            last_eval = self._train()
        log.info("trained frames %d-%d in %.0f s wall time", first_frame, self.frame,
                 time.perf_counter() - start)
        return last_eval

    def _train(self) -> dict[str, float]:
        cfg = self.cfg
        stack = FrameStack(cfg.frame_stack)
        timer: dict[str, float] = defaultdict(float)
        update_metrics: dict[str, list[float]] = defaultdict(list)
        bar = tqdm(total=cfg.num_train_frames, initial=self.frame, disable=not cfg.progress,
                   unit="frame", dynamic_ncols=True, smoothing=0.05)
        last_eval: dict[str, float] = {}
        next_eval = (self.frame // cfg.eval_every_frames + 1) * cfg.eval_every_frames
        episode_start, episode_frames, episode_reward = time.perf_counter(), 0, 0.0
        obs, info = self.env.reset()
        goals = self.goals.reset(obs, info)
        frames = stack.reset(to_gray84(obs["image"]))
        self._store_first(frames[-1], obs, goals)

        while self.frame < cfg.num_train_frames:
            t0 = time.perf_counter()
            action = self.agent.act(self.agent_obs(frames, obs, goals), self.frame, eval_mode=False)
            t1 = time.perf_counter()
            obs, game_reward, terminated, truncated, info = self.env.step(action)
            t2 = time.perf_counter()
            intrinsic = self.goals.reward(info)
            reward = game_reward if self.extrinsic else intrinsic
            if cfg.use_extr_rew and not self.extrinsic:
                reward += game_reward
            goals = self.goals.observe(obs, info)
            t3 = time.perf_counter()
            frames = stack.push(to_gray84(obs["image"]))
            last = terminated or truncated
            self.storage.add(frames[-1], action, reward, info["discount"],
                             self._text(obs), self._goal(goals), last, game_reward=game_reward)
            self.frame += 1
            episode_frames += 1
            episode_reward += reward
            bar.update(1)
            if reward > 0 and self.first_reward_frame is None:
                self.first_reward_frame = self.frame
                if self.agent.start_epsilon_decay(self.frame):
                    log.info("first positive reward at frame %d: epsilon starts decaying", self.frame)
            t4 = time.perf_counter()
            if self._should_update():
                batch = next(self._batch_iter())
                t5 = time.perf_counter()
                for key, value in self.agent.update(batch, self.frame).items():
                    update_metrics[key].append(value)
                timer["sample"] += t5 - t4
                timer["update"] += time.perf_counter() - t5
            timer["act"] += t1 - t0
            timer["env"] += t2 - t1
            timer["lm_reward"] += t3 - t2

            if last:
                self.episode += 1
                elapsed = time.perf_counter() - episode_start
                stats = info["episode_stats"]
                self.train_stats.write({**stats, "frame": self.frame})
                metrics = {
                    "train/episode_reward": episode_reward,
                    "train/episode_length": episode_frames,
                    "train/achievements": _achievements(stats),
                    "train/game_reward": stats["reward"],
                    "train/episode": self.episode,
                    "train/fps": episode_frames / max(elapsed, 1e-9),
                    "train/epsilon": self.agent.epsilon(self.frame),
                    "train/buffer_size": self.storage.num_transitions,
                    "reward/goal_matches": self.goals.matches,
                    **housekeep_run.episode_metrics(stats),
                    **{f"time/{k}": v / max(elapsed, 1e-9) for k, v in timer.items()},
                    **self._lm_metrics(),
                    **{f"train/{k}": float(np.mean(v)) for k, v in update_metrics.items()},
                }
                self.logger.log(metrics, self.frame)
                bar.set_postfix_str(
                    f"fps {metrics['train/fps']:.0f} eps {metrics['train/epsilon']:.3f} "
                    f"ep_reward {episode_reward:.2f} last_eval {last_eval.get('eval/episode_reward', float('nan')):.2f}",
                    refresh=False)
                timer.clear(), update_metrics.clear()
                self.goals.matches = 0
                episode_start, episode_frames, episode_reward = time.perf_counter(), 0, 0.0
                obs, info = self.env.reset()
                goals = self.goals.reset(obs, info)
                frames = stack.reset(to_gray84(obs["image"]))
                self._store_first(frames[-1], obs, goals)

            if self.frame >= next_eval or self.frame >= cfg.num_train_frames:
                next_eval += cfg.eval_every_frames
                last_eval = self.evaluator.run(self.frame)
                self.logger.log({**last_eval, **self._lm_metrics()}, self.frame)
                if last_eval:
                    log.info(_summary(last_eval, self.frame))
                if cfg.save_snapshot:
                    self.save_snapshot()
        bar.close()
        self.logger.close()
        return last_eval

    def _seeded_envs(self) -> dict[str, Any]:
        """The envs whose worlds follow (seed, episode number): Crafter's train and eval envs."""
        envs = {"train": self.env, "eval": self.evaluator.env}
        return {k: e for k, e in envs.items() if hasattr(e, "episode_count")}

    def _lm_metrics(self) -> dict[str, float]:
        """LM counters of the training and evaluation suggesters together (the budget entries
        describe the one process-wide ledger, so they are taken once)."""
        totals = dict(self.goals.suggester.metrics())
        for key, value in self.evaluator.goals.suggester.metrics().items():
            if not key.startswith("budget_"):
                totals[key] = totals.get(key, 0.0) + value
        return {f"lm/{k}": v for k, v in totals.items()}

    def _text(self, obs: dict[str, Any]) -> str:
        return obs["text_obs"] if self.cfg.use_language_state else ""

    def _goal(self, goals: list[str]) -> str:
        return goal_text(goals) if self.cfg.use_goal else ""

    def _store_first(self, frame: np.ndarray, obs: dict[str, Any], goals: list[str]) -> None:
        self.storage.add_first(frame, self._text(obs), self._goal(goals))

    def _should_update(self) -> bool:
        cfg = self.cfg
        return (self.frame >= cfg.num_seed_frames
                and self.frame % cfg.agent.update_every_steps == 0
                and self.storage.num_episodes > 0
                and (not cfg.train_after_reward or self.first_reward_frame is not None))

    def _batch_iter(self):
        if self._batches is None:
            self._batches = iter(self.loader)
        return self._batches

    # ------------------------------------------------------------------ snapshots
    def save_snapshot(self) -> Path:
        meta = {
            "frame": self.frame, "episode": self.episode,
            "first_reward_frame": self.first_reward_frame,
            "config": redacted(self.cfg),
            "versions": {"ellm": getattr(ellm, "__version__", "0.1.0"), "torch": str(torch.__version__)},
            "rng": _rng_state(),
            "env_episodes": {name: env.episode_count for name, env in self._seeded_envs().items()},
        }
        return checkpoint.save(self.run_dir / checkpoint.SNAPSHOT_NAME, self.agent.state_dict(), meta)

    def _restore(self, agent_state: dict[str, Any], meta: dict[str, Any]) -> None:
        self.agent.load_state_dict(agent_state)
        self.frame, self.episode = int(meta["frame"]), int(meta["episode"])
        self.first_reward_frame = meta.get("first_reward_frame")
        _set_rng_state(meta["rng"])
        for name, env in self._seeded_envs().items():  # new worlds, not the first ones again
            env.episode_count = meta.get("env_episodes", {}).get(name, 0)
        log.info("resumed %s at frame %d (episode %d)", self.cfg.snapshot_path, self.frame,
                 self.episode)


def _achievements(stats: dict[str, float]) -> int:
    return sum(1 for k, v in stats.items() if k.startswith("achievement_") and v > 0)


def _summary(metrics: dict[str, float], frame: int) -> str:
    if "housekeep/rearrange_success" in metrics:
        return housekeep_run.summary(metrics, frame)
    return (f"[eval @ {frame} frames] achievements/episode "
            f"{metrics.get('eval/episode_reward', float('nan')):.2f}, crafter score "
            f"{metrics.get('eval/score', float('nan')):.2f}%, episode length "
            f"{metrics.get('eval/episode_length', float('nan')):.0f}")


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
