"""Shared types of the LM module: the text state, the suggester protocol, novelty and counters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class TextState:
    """What a goal suggester reads about one Crafter state (ELLM.md §2.3)."""

    caption: str
    inventory: str = ""
    status: str = ""
    inventory_counts: Mapping[str, int] = field(default_factory=dict)


@runtime_checkable
class GoalSuggester(Protocol):
    """Suggests goals for a text state; the training loop's only view of the LM."""

    uses_success_gate: bool

    def reset(self) -> None:
        """New episode: forget the achieved goals."""

    def suggest(self, state: TextState) -> list[str]:
        """Goals for ``state`` in a deterministic order, achieved goals filtered out."""

    def mark_achieved(self, goal: str) -> None:
        """Filter ``goal`` (and its synonym) out of later suggestions until ``reset``."""

    def metrics(self) -> dict[str, float]:
        """Counters since construction, keys without namespace prefix."""

    def close(self) -> None:
        """End of the run: finish or give up the queries still under way (no more queries)."""


class NoveltyFilter:
    """The per-episode set of achieved goals (ELLM.md §4, novelty bonus), synonyms included."""

    def __init__(self, enabled: bool = True, synonyms: Mapping[str, str] | None = None) -> None:
        self.enabled = enabled
        self.synonyms = dict(synonyms or {})
        self._achieved: set[str] = set()

    def reset(self) -> None:
        self._achieved.clear()

    def mark(self, goal: str) -> None:
        goal = normalise_goal(goal)
        self._achieved.add(goal)
        if goal in self.synonyms:
            self._achieved.add(self.synonyms[goal])

    def is_achieved(self, goal: str) -> bool:
        return normalise_goal(goal) in self._achieved

    def keep(self, goals: Sequence[str]) -> list[str]:
        """``goals`` minus the achieved ones (unchanged when the filter is disabled)."""
        if not self.enabled:
            return list(goals)
        return [g for g in goals if not self.is_achieved(g)]


def normalise_goal(goal: str) -> str:
    """Lower-case, strip, single spaces, no trailing full stop: "  Chop  Tree." -> "chop tree"."""
    return " ".join(goal.lower().split()).rstrip(".").strip()


def truncate(goals: list[str], max_num_goals: int | None) -> list[str]:
    """The first ``max_num_goals`` goals (all when None)."""
    return goals if max_num_goals is None else goals[:max_num_goals]
