"""Where the goals shown to the agent come from (the goal sources a :class:`ellm.rollout.Rollout`
asks at each state), and the goal sentence the agent reads.

- :class:`SuggestedGoals`: the LM suggester's goals for the state just observed (ELLM.md §3),
  read as a text state by the game's ``state_of``; a goal the reward says was achieved is
  passed on to the suggester's novelty filter (:meth:`SuggestedGoals.achieved`).
- :class:`NoGoals`: a run whose agent reads no goal and learns from no goal reward asks no
  suggester at all (RND, APT, random actions, the paper's extrinsic runs).

A game's own goal sources (a single finetuning task, Housekeep's placements) live in its
folder under :mod:`ellm.games`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ellm.lm import GoalSuggester, LMCounters, TextState


class Goals(Protocol):
    """A goal source: ``reset`` at an episode's start and ``observe`` after each step return
    the goals for the state just observed; ``metrics`` are the run's ``lm/`` counters (without
    the prefix); ``answering_client`` the LM client whose model answers, if any."""

    def reset(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]: ...

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]: ...

    def metrics(self) -> dict[str, float]: ...

    def answering_client(self) -> Any: ...

    def close(self) -> None: ...


def goal_text(goals: Sequence[str], paper_setting: bool = False) -> str:
    """The goal string an agent with ``use_goal`` reads: in the paper setting as the original
    wrote it (goals joined by spaces, "Your goal is: ." when there is none), else as a list."""
    if paper_setting:
        return f"Your goal is: {' '.join(goals)}."
    return f"Your goal is: {', '.join(goals) if goals else 'none'}."


class SuggestedGoals:
    """The suggester's goals for each state (see the module docstring)."""

    def __init__(self, suggester: GoalSuggester,
                 state_of: Callable[[Mapping[str, Any], Mapping[str, Any]], TextState]):
        self.suggester = suggester
        self.state_of = state_of
        self.goals: list[str] = []

    def reset(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
        self.suggester.reset()
        return self.observe(obs, info)

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
        self.goals = self.suggester.suggest(self.state_of(obs, info))
        return self.goals

    def achieved(self, goal: str) -> None:
        """A step achieved ``goal``: not suggested again this episode (the novelty bonus)."""
        self.suggester.mark_achieved(goal)

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

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
        return []

    def metrics(self) -> dict[str, float]:
        return LMCounters().as_metrics()  # lm/queries 0: no LM was asked

    def answering_client(self) -> Any:
        return None

    def close(self) -> None:
        pass


__all__ = ["Goals", "NoGoals", "SuggestedGoals", "goal_text"]
