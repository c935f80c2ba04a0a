"""The training loop when actors collect (``num_actors`` >= 2; docs/scale.md).

:class:`ActorLoop` is the part of :class:`ellm.workspace.Workspace` that learns from the chunks
of steps the actors send: it counts their steps one by one as the one-process loop counts its
own (the frame counter, the replay, the updates due, the evaluations and snapshots at their
frames), and it publishes the learner's weights to the actors every ``actor_sync_frames``.
The frames of a chunk are counted when it is received; updates that fall due before the replay
holds a finished episode are made as soon as it does, so that the learner keeps the configured
ratio (:func:`updates_due`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from ellm import interrupt
from ellm.actors.learner import OpenEpisodes
from ellm.actors.messages import Chunk, EpisodeEnd
from ellm.actors.pool import ActorPool
from ellm.timing import Timer

log = logging.getLogger(__name__)


@dataclass
class Episode:
    """What the loop keeps of the training episode in progress (the rollout keeps the rest);
    with actors, of the time since the last training row."""

    timer: Timer = field(default_factory=Timer)
    updates: dict[str, list[Any]] = field(  # update metrics (ellm.agent.mean_metrics)
        default_factory=lambda: defaultdict(list))


def updates_due(frame: int, seed_frames: int, every: int, since: int = 0) -> int:
    """Updates made by ``frame`` at one per ``every`` frames: one at each frame from
    ``seed_frames`` (and ``since``) on that is a multiple of ``every``, as the one-process
    loop makes them."""
    start = max(seed_frames, since, 1)
    return max(0, frame // every - (start - 1) // every)


class ActorLoop:
    """Mixed into the workspace, whose counters, replay, agent and logger it drives."""

    def _train_with_actors(self) -> None:
        """Actors step their envs; this process learns from the chunks they send, each step
        counted as :meth:`_train_here` counts its own (see :meth:`_take`)."""
        cfg = self.cfg
        with ActorPool(cfg, self.num_actors, self.agent.policy_state(), frame=self.frame,
                       decay_from=self.first_reward_frame,
                       env_episodes=self.actor_env_episodes,
                       lm_spent=self.lm_spent_before) as pool:
            self._first_evaluation()  # the actors start up meanwhile
            self.actor_env_episodes += [0] * (self.num_actors - len(self.actor_env_episodes))
            self._open, self._row, self._row_frame = OpenEpisodes(self.storage), Episode(), self.frame
            self._updates_done, published = self._updates_due(), self.frame
            while self.frame < cfg.num_train_frames:
                interrupt.check()
                with self._row.timer("receive"):  # waiting for the actors
                    chunk = pool.receive()
                self._take(chunk)
                pool.took(chunk.actor, len(chunk), self.frame, self.first_reward_frame)
                if self.frame - published >= cfg.actor_sync_frames:
                    pool.publish(self.agent.policy_state())
                    published = self.frame
        encoded, shipped = self.agent.text.embedding_counts()
        log.info("learner text embeddings: %d encoded here, %d shipped by the actors",
                 encoded, shipped)

    def _take(self, chunk: Chunk) -> None:
        """Count a received chunk's steps one by one: the replay gets the episode the chunk
        ends, the learner makes the updates due, evaluations come at their frames."""
        self._open.add(chunk)
        if chunk.embeddings is not None:
            self.agent.text.add_embeddings(chunk.embeddings)
        if chunk.env_episodes is not None:
            self.actor_env_episodes[chunk.actor] = chunk.env_episodes
        for j, reward in enumerate(chunk.rewards):
            if self.frame >= self.cfg.num_train_frames:
                return  # the run's budget is spent: the rest of the chunk is dropped
            self._count(float(reward))
            ends = chunk.end is not None and bool(chunk.last[j])
            if ends:
                self._open.write(chunk.actor)
            while self._updates_done < self._updates_due() and self.storage.num_episodes:
                self._update(self._row)
                self._updates_done += 1
            if ends:
                self._end_actor_episode(chunk.actor, chunk.end)
            if self._eval_due():
                self._evaluate()

    def _updates_due(self) -> int:
        """Updates the configured ratio asks for by this frame (with train_after_reward,
        from the first reward on)."""
        cfg = self.cfg
        if not self.method.learns or (cfg.train_after_reward and self.first_reward_frame is None):
            return 0
        since = self.first_reward_frame if cfg.train_after_reward else 0
        return updates_due(self.frame, cfg.num_seed_frames, cfg.agent.update_every_steps, since)

    def _end_actor_episode(self, actor: int, end: EpisodeEnd) -> None:
        """An actor's episode, logged with the frames/s of all actors since the last row and
        this process's sections' share of that time beside the actor's own."""
        row, self._row = self._row, Episode()
        self.goals.update(actor, end.lm)
        frames, self._row_frame = self.frame - self._row_frame, self.frame
        self._log_episode(replace(end, fps=frames / row.timer.elapsed(),
                                  times={**end.times, **row.timer.fractions()}), row)


__all__ = ["ActorLoop", "Episode", "updates_due"]
