"""Text-Craftax as a game of the Craftax engine (docs/craftax.md). This package holds what the
compiled loop needs of the game (``game``, ``goals``, ``reward``); importing it alone loads no
JAX, so the report can name Craftax runs cheaply."""

from __future__ import annotations

from ellm.games.report import GameReport
from text_crafter import ACHIEVEMENTS, crafter_score, success_rates


class CraftaxGame:
    """The report's view of Craftax runs (the torch loop never builds this game)."""

    name = "craftax"
    env_ids = ("Craftax-Classic-v1", "Craftax-Classic-v2")
    report = GameReport("craftax", label="Craftax", achievements=tuple(ACHIEVEMENTS),
                        success_rates=success_rates, score=crafter_score)


__all__ = ["CraftaxGame"]
