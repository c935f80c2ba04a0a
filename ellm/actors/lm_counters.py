"""The learner's view of its actors' LM counters, pooled with its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ellm.goals import Goals
from ellm.run.lm_usage import pool_lm_metrics


class ActorLMCounters:
    """Stands in for the training goal source when actors hold theirs."""

    def __init__(self, eval_goals: Goals):
        self.eval_goals = eval_goals
        self.latest: dict[int, dict[str, float]] = {}

    def update(self, actor: int, metrics: Mapping[str, float]) -> None:
        self.latest[actor] = dict(metrics)

    def metrics(self) -> dict[str, float]:
        return pool_lm_metrics([*self.latest.values(), self.eval_goals.metrics()])

    def answering_client(self) -> Any:
        return self.eval_goals.answering_client()

    def close(self) -> None:
        pass


__all__ = ["ActorLMCounters"]
