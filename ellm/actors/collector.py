"""The loop's steps when actors collect: the chunks they send, taken one step at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ellm.actors.lm_counters import ActorLMCounters
from ellm.actors.messages import Chunk
from ellm.actors.pool import ActorPool
from ellm.loop.collect import Collected
from ellm.loop.timing import Timer
from ellm.replay import EpisodeStart


class ActorCollector:
    """A Collector over an ActorPool; ``counters`` gives the loop's frame and epsilon's decay start.
    """

    def __init__(self, pool: ActorPool, agent: Any, goals: ActorLMCounters, env_episodes: list[int],
                 sync_frames: int, counters: Callable[[], tuple[int, int | None]]):
        self.pool, self.agent, self.goals = pool, agent, goals
        self.env_episodes, self.sync_frames, self.counters = env_episodes, sync_frames, counters
        self.published = counters()[0]
        self._chunk: Chunk | None = None
        self._next = 0

    def begin(self) -> list[tuple[int, EpisodeStart]]:
        return []

    def next(self, timer: Timer) -> Collected:
        while self._chunk is None or self._next >= len(self._chunk):
            self._done_with_chunk()
            with timer("receive"):
                self._take(self.pool.receive())
        got = self._chunk.collected(self._next)
        self._next += 1
        if got.end is not None:
            self.goals.update(got.source, got.end.lm)
        return got

    def restart(self, source: int) -> None:
        return None

    def _take(self, chunk: Chunk) -> None:
        self._chunk, self._next = chunk, 0
        if chunk.embeddings is not None:
            self.agent.text.add_embeddings(chunk.embeddings)
        if chunk.env_episodes is not None:
            self.env_episodes[chunk.actor] = chunk.env_episodes

    def _done_with_chunk(self) -> None:
        """The pool learns the chunk was taken; the actors get fresh weights when due."""
        if self._chunk is None:
            return
        frame, decay_from = self.counters()
        self.pool.took(self._chunk.actor, len(self._chunk), frame, decay_from)
        self._chunk = None
        if frame - self.published >= self.sync_frames:
            self.pool.publish(self.agent.policy_state())
            self.published = frame


__all__ = ["ActorCollector"]
