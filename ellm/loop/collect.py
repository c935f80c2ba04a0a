"""Where the training loop's steps come from: this process's rollout, or the actors'."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ellm.agent.inputs import AgentInputs
from ellm.loop.rollout import Rollout, Step
from ellm.loop.timing import Timer
from ellm.replay import EpisodeStart, Row


@dataclass(frozen=True)
class EpisodeEnd:
    """What the logger needs of a finished episode, as :meth:`of` takes it from the rollout."""

    summary: dict[str, float]
    stats: dict[str, Any]
    reward_metrics: list[str]
    times: dict[str, float]
    fps: float
    lm: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, rollout: Rollout, info: Any, timer: Timer, lm: dict[str, float] | None = None
           ) -> EpisodeEnd:
        summary = rollout.summary()
        return cls(summary, dict(info["episode_stats"]),
                   [k for r in rollout.rewards for k in r.episode_metrics()],
                   timer.fractions(), summary["length"] / timer.elapsed(), dict(lm or {}))


@dataclass(frozen=True)
class Collected:
    """One step for the loop: its row, its source, and the episode's start or end when it has them.
    """

    row: Row
    source: int = 0
    start: EpisodeStart | None = None
    end: EpisodeEnd | None = None


class Collector(Protocol):
    def begin(self) -> list[tuple[int, EpisodeStart]]:
        """The episodes it opens before its first step, as (source, reset observation)."""

    def next(self, timer: Timer) -> Collected:
        """The next step; ``timer`` times its sections in the loop's current log window."""

    def restart(self, source: int) -> EpisodeStart | None:
        """The next episode's reset observation, or None where it comes with its first step."""


def row_of(step: Step, inputs: AgentInputs) -> Row:
    """The replay row of a rollout step."""
    return Row(step.frame, step.action, step.reward, float(step.info["discount"]),
               inputs.text(step.obs), inputs.goal(step.goals), step.last)


def start_of(frame: Any, rollout: Rollout) -> EpisodeStart:
    """The replay's first row of the episode ``rollout`` has just reset to."""
    return EpisodeStart(frame, rollout.inputs.text(rollout.obs),
                        rollout.inputs.goal(rollout.goals))


@dataclass
class LogWindow:
    """What the loop gathers between two training rows: the timer and update metrics."""

    frame: int
    timer: Timer = field(default_factory=Timer)
    updates: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))


class LocalCollector:
    """This process steps the env with the learner's own agent (``act``)."""

    def __init__(self, rollout: Rollout, act: Callable[[dict[str, Any]], int]):
        self.rollout, self.act = rollout, act

    def begin(self) -> list[tuple[int, EpisodeStart]]:
        return [(0, self.restart(0))]

    def next(self, timer: Timer) -> Collected:
        step = self.rollout.step(self.act, timer)
        end = EpisodeEnd.of(self.rollout, step.info, timer) if step.last else None
        return Collected(row_of(step, self.rollout.inputs), end=end)

    def restart(self, source: int) -> EpisodeStart:
        # Reset before this frame's evaluation, so the next goals are counted before its row.
        return start_of(self.rollout.reset(), self.rollout)


__all__ = ["Collected", "Collector", "EpisodeEnd", "LocalCollector", "LogWindow", "row_of",
           "start_of"]
