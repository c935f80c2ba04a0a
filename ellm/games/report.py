"""What the report shows of a game's runs, apart from what the training loop needs of it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GameReport:
    """How ``python -m ellm_tools.report`` presents a game's runs."""

    name: str  # the ``game`` a run records
    label: str = ""  # put before method names ("Housekeep: ELLM-oracle"); "" for none
    scores_achievements: bool = False  # episodes carry Crafter's achievements: score, success rates
    progress_metric: tuple[str, str] | None = None  # (logged metric, figure title) per method
    table_metrics: tuple[str, ...] = ()  # its logged evaluation metrics tabled per method
