"""What every goal suggester shares: the protocol, the novelty filter and goal spelling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from lmclient.counters import LMCounters


@runtime_checkable
class GoalSuggester(Protocol):
    """Suggests goals for a game's state; the training loop's only view of the LM."""

    uses_success_gate: bool

    def reset(self) -> None:
        """New episode: forget the achieved goals."""

    def suggest(self, state: Any) -> list[str]:
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


class ModelFreeSuggester:
    """The episode bookkeeping of the suggesters that ask no model (the oracle, Novelty)."""

    uses_success_gate: bool = True

    def __init__(self, *, novelty_bonus: bool = True, max_num_goals: int | None = None,
                 synonyms: Mapping[str, str] | None = None) -> None:
        self.novelty = NoveltyFilter(novelty_bonus, synonyms)
        self.max_num_goals = max_num_goals
        self.counters = LMCounters()

    def reset(self) -> None:
        self.novelty.reset()

    def mark_achieved(self, goal: str) -> None:
        self.novelty.mark(goal)

    def metrics(self) -> dict[str, float]:
        return {**self.counters.as_metrics(), "budget_spent": 0.0, "budget_exhausted": 0.0}

    def close(self) -> None:
        """Nothing to release: no model is asked."""


def normalise_goal(goal: str) -> str:
    """Lower-case, strip, single spaces, no trailing full stop: "  Chop  Tree." -> "chop tree"."""
    return " ".join(goal.lower().split()).rstrip(".").strip()


def truncate(goals: list[str], max_num_goals: int | None) -> list[str]:
    """The first ``max_num_goals`` goals (all when None)."""
    return goals if max_num_goals is None else goals[:max_num_goals]


def __getattr__(name: str) -> Any:
    # TextState moved to the game it describes; the Craftax engine's host still reads it here.
    if name == "TextState":
        from ellm.games.crafter.state import TextState

        return TextState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
