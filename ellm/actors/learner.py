"""The learner's records of its actors: their episodes in progress and their LM counters.

The main process is the only writer of the replay and of its string table: it keeps each
actor's open episode as the chunks arrive and writes it through the
:class:`~ellm.replay.ReplayStorage` when its last chunk is taken. Episodes still open when a run
stops (or is snapshotted and later resumed) are never written: their frames were counted, their
transitions are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ellm.actors.messages import Chunk
from ellm.goals import Goals
from ellm.replay import ReplayStorage


class OpenEpisodes:
    """Each actor's episode in progress, written whole when it ends."""

    def __init__(self, storage: ReplayStorage):
        self.storage = storage
        self.open: dict[int, list[Chunk]] = {}

    def add(self, chunk: Chunk) -> None:
        if chunk.start is not None:
            self.open[chunk.actor] = [chunk]
        elif chunk.actor in self.open:
            self.open[chunk.actor].append(chunk)
        else:
            raise RuntimeError(f"actor {chunk.actor} continued an episode it never started")

    def write(self, actor: int) -> None:
        """Store ``actor``'s episode, which its last chunk (taken whole) ended."""
        chunks = self.open.pop(actor)
        start = chunks[0].start
        assert start is not None and chunks[-1].end is not None, "an episode is written whole"
        self.storage.add_first(start.frame, start.text, start.goal)
        for c in chunks:
            for j in range(len(c)):
                self.storage.add(c.frames[j], int(c.actions[j]), float(c.rewards[j]),
                                 float(c.discounts[j]), c.texts[j], c.goals[j], bool(c.last[j]),
                                 game_reward=float(c.game_rewards[j]))


LM_FLAGS = ("budget_exhausted", "constraint_refused")  # 0/1 per goal source, not counts


def pool_lm_metrics(parts: list[Mapping[str, float]]) -> dict[str, float]:
    """LM counters of several goal sources (in separate processes, or a process's training and
    evaluation ones), as one: counts and dollars add up, ``latency_s`` (a mean per API call)
    is weighed by ``api_calls``, a flag (``LM_FLAGS``: a process spent its share, a server
    refused constraints) is 1 when it is 1 for any source."""
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0.0) + value
    calls = out.get("api_calls", 0.0)
    if "latency_s" in out:
        weighted = sum(p.get("latency_s", 0.0) * p.get("api_calls", 0.0) for p in parts)
        out["latency_s"] = weighted / calls if calls else 0.0
    for flag in LM_FLAGS:
        if flag in out:
            out[flag] = max(p.get(flag, 0.0) for p in parts)
    return out


LM_GAUGES = ("budget_exhausted", "constraint_refused", "in_flight")  # of now, not counts


def lm_counts_on(before: Mapping[str, float], part: Mapping[str, float]) -> dict[str, float]:
    """A resumed run's LM counters: ``part``'s (since the resumption) added to ``before`` (the
    snapshot's), so that they count on; the gauges (``LM_GAUGES``) are ``part``'s alone."""
    if not before:
        return dict(part)
    totals = pool_lm_metrics([before, part])
    for key in LM_GAUGES:
        if key in part:
            totals[key] = part[key]
        else:
            totals.pop(key, None)
    return totals


class ActorGoals:
    """The learner's view of the goal sources its actors hold: :meth:`metrics` pools the
    counters each actor sent last with those of the evaluation source ``eval_goals``."""

    def __init__(self, eval_goals: Goals):
        self.eval_goals = eval_goals
        self.latest: dict[int, dict[str, float]] = {}

    def update(self, actor: int, metrics: Mapping[str, float]) -> None:
        self.latest[actor] = dict(metrics)

    def metrics(self) -> dict[str, float]:
        return pool_lm_metrics([*self.latest.values(), self.eval_goals.metrics()])

    def answering_client(self) -> Any:
        return self.eval_goals.answering_client()  # the actors ask the same LM

    def close(self) -> None:
        pass  # each actor closes its own


__all__ = ["ActorGoals", "OpenEpisodes", "lm_counts_on", "pool_lm_metrics"]
