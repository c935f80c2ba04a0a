"""The training loop: one Workspace for pretraining, finetuning and guided exploration.
One loop takes the steps of a collector (this process's rollout, or the actors' chunks),
counted one by one either way: same replay, same updates per frame, same evaluations."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm.contrib.logging import logging_redirect_tqdm

import ellm
from ellm.actors import ActorCollector, ActorLMCounters, ActorPool, lm_budget_share
from ellm.agent.dqn import mean_metrics
from ellm.conf import resumes
from ellm.games import EpisodeCounted, eval_summary
from ellm.goals import NoGoals
from ellm.lm.nonblocking import fallback_warning
from ellm.loop import interrupt
from ellm.loop.collect import Collector, EpisodeEnd, LocalCollector, LogWindow
from ellm.loop.evaluate import Evaluator
from ellm.loop.parts import add_guide, goal_source, make_agent, rollout_parts
from ellm.loop.rollout import DIAGNOSTICS, Rollout
from ellm.loop.timing import Progress, Timer
from ellm.replay import (
    ReplayStorage,
    StringTable,
    drop_episodes_from,
    make_replay_loader,
)
from ellm.replay.loader import DeviceBatches
from ellm.run import checkpoint
from ellm.run.checkpoint import rng_state, seed_everything, set_rng_state
from ellm.run.command_line import run_dir_lines, write_record
from ellm.run.config import RunSpec, resolve_threads, resolve_workers, run_config
from ellm.run.lm_usage import LMUsage
from ellm.run.logger import Logger

log = logging.getLogger(__name__)


def updates_due(frame: int, seed_frames: int, every: int, since: int = 0) -> int:
    """Updates made by ``frame`` at one per ``every`` frames from ``seed_frames`` (and ``since``).
    """
    start = max(seed_frames, since, 1)
    return max(0, frame // every - (start - 1) // every)


class Workspace:
    """Everything one training run needs; ``train()`` runs it."""

    def __init__(self, spec: RunSpec, run_dir: str | Path):
        self.spec, cfg = spec, spec.cfg
        self.cfg, self.game, self.method = cfg, spec.game, spec.method
        self.run = run = self.spec.run
        self.device = self.spec.device
        self.num_actors = int(run.num_actors)
        resuming = resumes(run.snapshot_path, run.finetune_snapshot)
        snapshot = checkpoint.load(run.snapshot_path) if run.snapshot_path else None
        self.paper = self.game.paper_setting(spec.env.name)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(resolve_threads(run.torch_threads))
        log.info("%s on %s; device: %s (asked: %s); torch threads: %d; run dir: %s",
                 self.method.name, self.spec.env.name, self.device, cfg.device,
                 torch.get_num_threads(), self.run_dir)
        seed_everything(run.seed)
        keep = int(snapshot[1]["frame"]) if snapshot is not None and resuming else None
        # The LM budget is the run's: the dollars its earlier parts spent are not spent again.
        earlier = snapshot[1] if snapshot is not None and resuming else {}
        self.lm_spent_before = float(earlier.get("lm_spent", 0.0))
        self._build_rollouts(keep)
        self._build_replay(earlier if resuming else None)
        self.agent = self._make_agent(hold_epsilon=run.decay_after_reward)
        self.counters = checkpoint.RunCounters()
        if snapshot is not None and resuming:
            self._restore(*snapshot)
        elif snapshot is not None:
            self.agent.load_weights(snapshot[0])
            log.info("finetuning: loaded network weights from %s", run.snapshot_path)
        add_guide(self.agent, spec, **self._agent_build())

        write_record(self.run_dir, self.record())
        self.logger = Logger(
            self.run_dir, use_tb=run.use_tb, use_wandb=run.use_wandb,
            wandb_config=self.record(), wandb_name=run.exp_name, resume_id=run.resume_id,
            resumed_at=self.counters.frame if resuming else None)
        self.resumed = resuming
        self.train_stats = self.game.stats_writer(self.run_dir / "train" / "stats.jsonl",
                                                  keep_until=keep)
        self.last_eval: dict[str, float] = {}
        self.lm = LMUsage(self.goals, self.eval_goals, pooled=isinstance(self.goals, ActorLMCounters),
                          before=earlier.get("lm_metrics"), spent_before=self.lm_spent_before)

    def _build_rollouts(self, keep_until: int | None) -> None:
        """The training rollout (none when actors collect) and the evaluator's."""
        spec, run, game = self.spec, self.run, self.game
        # Every process holds a share of the LM budget the run's earlier parts left.
        processes = self.num_actors + 1 if self.num_actors > 1 else 1
        if processes > 1 or self.lm_spent_before:
            spec = replace(spec, lm=lm_budget_share(spec.lm, processes, self.lm_spent_before))
        parts = rollout_parts(spec, self.device, run.seed if self.num_actors == 1 else None)
        self.inputs, self.embedder = parts.inputs, parts.embedder
        self.rollout = parts.rollout(run.frame_stack) if parts.env is not None else None
        eval_env = game.make_env(spec, run.seed + 1)
        eval_goals, eval_rewards = goal_source(spec, self.embedder)
        self.goals = parts.goals if parts.goals is not None else ActorLMCounters(eval_goals)
        self.evaluator = Evaluator(
            Rollout(eval_env, eval_goals, eval_rewards, self.inputs, run.frame_stack,
                    game.covered), game,
            stats_path=self.run_dir / "eval" / "stats.jsonl",
            num_episodes=run.num_eval_episodes,
            single_goals=game.single_goals(spec) if run.single_goal_eval else (),
            goal_rollout=Rollout(eval_env, NoGoals(), [], self.inputs, run.frame_stack,
                                 game.covered),
            sources=[self.goals, eval_goals], keep_until=keep_until)
        self.eval_goals = eval_goals

    def _build_replay(self, snapshot_meta: dict[str, Any] | None) -> None:
        """The replay; a resumed run first drops the episodes written after its snapshot."""
        run = self.run
        replay_dir = self.run_dir / "buffer"
        keep = None if snapshot_meta is None else snapshot_meta.get("replay_episodes")
        if keep is not None and replay_dir.is_dir():
            if dropped := drop_episodes_from(replay_dir, keep):
                log.info("replay: dropped %d episodes (%d steps) written after the snapshot",
                         len(dropped), sum(f.length for f in dropped))
        elif snapshot_meta is not None and replay_dir.is_dir():
            log.warning("replay: the snapshot does not say how many episodes it had (written "
                        "before ellm recorded it), so episodes written after it stay in %s",
                        replay_dir)
        self.strings = StringTable(replay_dir / "strings.jsonl")
        self.storage = ReplayStorage(replay_dir, self.strings, first_index=keep or 0)
        self.loader = make_replay_loader(
            replay_dir, capacity=run.replay_buffer_size, batch_size=run.batch_size,
            num_workers=resolve_workers(run.replay_buffer_num_workers), nstep=run.nstep,
            discount=run.discount,
            frame_stack=run.frame_stack, clip_reward=run.clip_reward,
            save_buffer=run.save_buffer, seed=run.seed,
            per_episode=self.paper)
        self._batches = None

    @property
    def env(self) -> Any:
        """The training env (None when actors collect)."""
        return self.rollout.env if self.rollout is not None else None

    def record(self) -> dict[str, Any]:
        """What this run is: the resolved config without secrets, its method and game."""
        language = getattr(getattr(self.agent, "options", None), "language_input", None)
        resolved = {} if language is None else {"language_input": bool(language)}
        return {**self._config(), "method": self.method.name, "game": self.game.name,
                "ellm_version": ellm.__version__, **resolved}

    def _config(self) -> dict[str, Any]:
        """The resolved config without secrets, naming the LM model that answers."""
        return run_config(self.cfg, self.goals.answering_client())

    def _make_agent(self, hold_epsilon: bool):
        return make_agent(self.spec, hold_epsilon=hold_epsilon, **self._agent_build())

    def _agent_build(self) -> dict[str, Any]:
        return {"num_actions": self.evaluator.env.action_space.n,
                "device": self.device,
                "embedder": self.embedder, "strings": self.strings, "seed": self.run.seed}

    def train(self) -> dict[str, float]:
        """Train to ``num_train_frames``; returns the last evaluation's metrics."""
        run, timer, first_frame = self.run, Timer(), self.counters.frame
        self.progress = Progress(run.num_train_frames, self.counters.frame, run.progress,
                                 every_s=run.progress_every_s, seed_frames=run.num_seed_frames)
        try:
            with logging_redirect_tqdm(), self.collector() as collector:
                self._loop(collector)
            self.progress.close()
        finally:
            drained = self.lm.close()
            if drained:
                self.logger.log(drained, self.counters.frame)
            if (slow_lm := fallback_warning(self.lm.counts())) is not None:
                log.warning(slow_lm)
            self.logger.close()
        self.wall_time = timer.elapsed()
        log.info("trained frames %d-%d in %.0f s wall time", first_frame, self.counters.frame,
                 self.wall_time)
        return self.last_eval

    @contextlib.contextmanager
    def collector(self) -> Iterator[Collector]:
        """This process's rollout, or the actors' (started here, stopped on leaving)."""
        counters = self.counters
        if self.num_actors == 1:
            yield LocalCollector(
                self.rollout, lambda inputs: self.agent.act(inputs, counters.frame, eval_mode=False))
            return
        episodes = counters.actor_env_episodes
        with ActorPool(self.spec, self.num_actors, self.agent.policy_state(), frame=counters.frame,
                       decay_from=counters.first_reward_frame, env_episodes=episodes,
                       lm_spent=self.lm_spent_before) as pool:
            episodes += [0] * (self.num_actors - len(episodes))
            yield ActorCollector(pool, self.agent, self.goals, episodes, self.run.actor_sync_frames,
                                 lambda: (counters.frame, counters.first_reward_frame))
        encoded, shipped = self.agent.text.embedding_counts()
        log.info("learner text embeddings: %d encoded here, %d shipped by the actors",
                 encoded, shipped)

    def _loop(self, collector: Collector) -> None:
        """Store and count each collected step, make the updates due, log and evaluate when due."""
        if self.counters.frame == 0 < self.run.num_train_frames and not self.resumed:
            self._evaluate()  # the untrained agent, as the original evaluates at step 0
        for source, start in collector.begin():
            self.storage.add_first(start, source)
        window, done = LogWindow(self.counters.frame), self._updates_due()
        while self.counters.frame < self.run.num_train_frames:
            interrupt.check()
            got = collector.next(window.timer)
            if got.start is not None:
                self.storage.add_first(got.start, got.source)
            self.storage.add(got.row, got.source)
            if self.counters.count(got.row.reward) and self.agent.start_epsilon_decay(
                    self.counters.frame):
                log.info("rewards reached 1 at frame %d: epsilon starts decaying",
                         self.counters.frame)
            self.progress.update(self.counters.frame)
            # Updates due before the replay holds an episode are made once it does (possible with
            # actors), so every run keeps the configured ratio.
            while done < self._updates_due() and self.storage.num_episodes:
                self._update(window)
                done += 1
            if got.end is not None:
                self._log_episode(got.end, window)
                window = LogWindow(self.counters.frame)
                if (start := collector.restart(got.source)) is not None:
                    self.storage.add_first(start, got.source)
            if self._eval_due():
                self._evaluate()

    def closing_message(self) -> str:
        """The end of a run in words: what was trained, how it did, where it is, what next."""
        lines = [(f"Trained {self.method.name} on {self.spec.env.name} up to frame "
                  f"{self.counters.frame} ({self.wall_time / 60:.1f} min of wall time).")]
        if self.last_eval:
            n = self.run.num_eval_episodes
            lines.append(f"Last evaluation ({n} episode{'s' * (n != 1)}): "
                         f"{self.game.describe(self.last_eval)}.")
        if (client := self.goals.answering_client()) is not None:
            c = self.lm.counts()
            lines.append(
                f"LM {client.spec.lm}: {c.get('queries', 0):.0f} queries, {c.get('api_calls', 0):.0f} "
                f"API calls, {c.get('cache_hits', 0):.0f} cache hits, {c.get('cache_misses', 0):.0f} "
                f"cache misses; ${self.lm.spent():.4f} spent of its ${self.spec.lm.budget:.2f} budget.")
        return "\n".join(lines + run_dir_lines(self.run_dir))

    def _updates_due(self) -> int:
        """Updates the configured ratio asks for by this frame."""
        run, first = self.run, self.counters.first_reward_frame
        if not self.method.learns or (run.train_after_reward and first is None):
            return 0
        since = first if run.train_after_reward else 0
        return updates_due(self.counters.frame, run.num_seed_frames, self.spec.agent.update_every_steps,
                           since)

    def _update(self, window: LogWindow) -> None:
        with window.timer("sample"):
            if self._batches is None:
                self._batches = DeviceBatches(iter(self.loader), self.device)
            batch = next(self._batches)
        with window.timer("update"):
            for key, value in self.agent.update(batch, self.counters.frame).items():
                window.updates[key].append(value)

    def _log_episode(self, end: EpisodeEnd, window: LogWindow) -> None:
        """A training row: the episode, frames/s and each section's share of the time."""
        self.counters.episode += 1
        end = replace(end, fps=(self.counters.frame - window.frame) / window.timer.elapsed(),
                      times={**end.times, **window.timer.fractions()})
        summary, stats = end.summary, end.stats
        lm, updates = self.lm.log_now(), mean_metrics(window.updates)
        self.train_stats.write({**stats, "frame": self.counters.frame})
        self.logger.log({
            "train/episode_reward": summary["reward"],
            "train/episode_length": summary["length"],
            "train/game_reward": stats["reward"],
            "train/episode": self.counters.episode,
            "train/fps": end.fps,
            "train/epsilon": self.agent.epsilon(self.counters.frame),
            "train/buffer_size": self.storage.num_transitions,
            "train/updates": self.agent.num_updates,
            **{f"train/{k}": summary[k] for k in DIAGNOSTICS},
            **{f"reward/{k}": summary[k] for k in end.reward_metrics},
            **self.game.episode_metrics(stats),
            **{f"time/{k}": v for k, v in end.times.items()},
            **lm,
            **{f"train/{k}": v for k, v in updates.items()},
        }, self.counters.frame)
        status = f"eps {self.agent.epsilon(self.counters.frame):.3f} | {self._shown_return(summary, updates)}"
        if self.last_eval:
            key, label = self.game.headline
            status += f" | last eval {self.last_eval[key]:.2f} {label}"
        self.progress.set_status(status)

    def _shown_return(self, summary: dict[str, float], updates: dict[str, float]) -> str:
        if self.method.game_reward:
            return f"game return {summary['reward']:.2f}"
        if self.method.goal_reward or "intrinsic_return" not in updates:
            return f"intrinsic return {summary['reward']:.2f}"
        # RND, NovelD, APT: their reward is computed per batch, at update
        return f"intrinsic return {updates['intrinsic_return']:.2f} (batches)"

    def _eval_due(self) -> bool:
        every = self.run.eval_every_frames
        return self.counters.frame % every == 0 or self.counters.frame >= self.run.num_train_frames

    def _evaluate(self) -> None:
        metrics = self.evaluator.run(self.agent, self.counters.frame)
        if self.counters.frame >= self.run.num_train_frames:
            self.lm.close()
        self.logger.log({**metrics, **self.lm.log_now()}, self.counters.frame)
        if metrics:
            self.last_eval = metrics
            log.info(eval_summary(self.game, metrics, self.counters.frame))
        if self.run.save_snapshot:
            self.save_snapshot()

    def _seeded_envs(self) -> dict[str, Any]:
        """The envs whose worlds follow (seed, episode number), e.g. Crafter's."""
        envs = {"train": self.env, "eval": self.evaluator.env}
        return {k: e for k, e in envs.items() if isinstance(e, EpisodeCounted)}

    def save_snapshot(self) -> Path:
        meta = {
            **self.counters.meta(),
            "method": self.method.name, "game": self.game.name,
            "config": self._config(),
            "versions": {"ellm": ellm.__version__, "torch": str(torch.__version__)},
            "rng": rng_state(),
            "env_episodes": {name: env.episode_count for name, env in self._seeded_envs().items()},
            "replay_episodes": self.storage.episodes_written,
            "lm_spent": self.lm.spent(),
            "lm_metrics": self.lm.counts(),
        }
        text = getattr(self.agent, "text", None)
        if self.run.save_buffer and text is not None:
            text.save_embeddings(self.run_dir / checkpoint.EMBEDDINGS_NAME)
        return checkpoint.save(self.run_dir / checkpoint.SNAPSHOT_NAME, self.agent.state_dict(), meta)

    def _restore(self, agent_state: dict[str, Any], meta: dict[str, Any]) -> None:
        self.agent.load_state_dict(agent_state)
        self.counters = checkpoint.RunCounters.from_meta(meta)
        set_rng_state(meta["rng"])
        for name, env in self._seeded_envs().items():  # new worlds, not the first ones again
            env.episode_count = meta.get("env_episodes", {}).get(name, 0)
        log.info("resumed %s at frame %d (episode %d)", self.run.snapshot_path, self.counters.frame,
                 self.counters.episode)
        if self.lm_spent_before:
            log.info("LM budget: $%.4f spent before this resumption, $%.4f left of $%.2f",
                     self.lm_spent_before, max(0.0, self.spec.lm.budget - self.lm_spent_before),
                     self.spec.lm.budget)
        text = getattr(self.agent, "text", None)
        saved = checkpoint.resolve(self.run.snapshot_path, "snapshot_path").with_name(
            checkpoint.EMBEDDINGS_NAME)
        if text is not None and saved.is_file():
            log.info("text embeddings: %d taken from %s", text.load_embeddings(saved), saved)


__all__ = ["Workspace", "updates_due"]
