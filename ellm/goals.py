"""Where the goals shown to the agent come from, and the goal sentence the agent reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ellm.lm.base import GoalSuggester


class Goals(Protocol):
    """A goal source: ``reset`` and ``observe`` return the goals for the state just observed;
    ``observe`` first learns which goals the step achieved (from the rewards, via the rollout).
    """

    def reset(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]: ...

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any],
                achieved: Sequence[str] = ()) -> list[str]: ...

    def metrics(self) -> dict[str, float]: ...

    def answering_client(self) -> Any: ...

    def close(self) -> None: ...


def goal_text(goals: Sequence[str], paper_setting: bool = False) -> str:
    """The goal string an agent reads: in the paper setting as the original wrote it."""
    if paper_setting:
        return f"Your goal is: {' '.join(goals)}."
    return f"Your goal is: {', '.join(goals) if goals else 'none'}."


class SuggestedGoals:
    """The suggester's goals for each state (see the module docstring)."""

    def __init__(self, suggester: GoalSuggester,
                 state_of: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]):
        self.suggester = suggester
        self.state_of = state_of
        self.goals: list[str] = []

    def reset(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
        self.suggester.reset()
        return self.observe(obs, info)

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any],
                achieved: Sequence[str] = ()) -> list[str]:
        for goal in achieved:  # not suggested again this episode (the novelty bonus)
            self.suggester.mark_achieved(goal)
        self.goals = self.suggester.suggest(self.state_of(obs, info))
        return self.goals

    @property
    def uses_success_gate(self) -> bool:
        return getattr(self.suggester, "uses_success_gate", True)

    def metrics(self) -> dict[str, float]:
        return self.suggester.metrics()

    def answering_client(self) -> Any:
        return getattr(self.suggester, "client", None)

    def close(self) -> None:
        self.suggester.close()


class NoGoals:
    """No goal, no suggester (see the module docstring)."""

    def reset(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
        return []

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any],
                achieved: Sequence[str] = ()) -> list[str]:
        return []

    def metrics(self) -> dict[str, float]:
        return {}  # no LM: no lm.csv, no lm/ scalars

    def answering_client(self) -> Any:
        return None

    def close(self) -> None:
        pass


__all__ = ["Goals", "NoGoals", "SuggestedGoals", "goal_text"]
