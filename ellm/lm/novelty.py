"""The Novelty baseline's suggester (``lm_class=Novelty``, the original's ``BaselineModel``), on
the goal list of any game."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ellm.lm.base import ModelFreeSuggester, truncate


class NoveltySuggester(ModelFreeSuggester):
    """The Novelty baseline: every goal of ``all_goals`` not achieved yet this episode."""

    uses_success_gate = False

    def __init__(self, all_goals: Sequence[str], *, novelty_bonus: bool = True,
                 max_num_goals: int | None = None,
                 synonyms: Mapping[str, str] | None = None) -> None:
        super().__init__(novelty_bonus=novelty_bonus, max_num_goals=max_num_goals,
                         synonyms=synonyms)
        if not all_goals:
            raise ValueError("the Novelty suggester needs a non-empty all_goals list")
        self.all_goals = tuple(dict.fromkeys(all_goals))

    def suggest(self, state: Any) -> list[str]:
        self.counters.queries += 1
        return truncate(self.novelty.keep(self.all_goals), self.max_num_goals)


BaselineModel = NoveltySuggester  # its name until 0.x: kept one release for imports
