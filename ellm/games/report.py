"""What the report shows of a game's runs, apart from what the training loop needs of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GameReport"]


@dataclass(frozen=True)
class GameReport:
    """How ``python -m ellm_tools.report`` presents a game's runs."""

    name: str  # the ``game`` a run records
    label: str = ""  # put before method names ("Housekeep: ELLM-oracle"); "" for none
    progress_metric: tuple[str, str] | None = None  # (logged metric, figure title) per method
    table_metrics: tuple[str, ...] = ()  # its logged evaluation metrics tabled per method
    # Episodes carry achievements: their names, each one's success rate over episodes, and the
    # game's score of those rates (Crafter's).
    achievements: tuple[str, ...] = ()
    success_rates: Callable[[Sequence[Mapping[str, Any]]], dict[str, float]] | None = None
    score: Callable[[Mapping[str, float]], float] | None = None

    @property
    def scores_achievements(self) -> bool:
        return bool(self.achievements)
