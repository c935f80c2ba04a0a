"""Per-episode statistics in Crafter's ``stats.jsonl`` format, success rates and the score
(ELLM.md §2.5)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import crafter

from text_game.stats import StatsWriter, load_stats  # noqa: F401 - re-exported: a shared format

ACHIEVEMENTS: tuple[str, ...] = tuple(crafter.constants.achievements)


def achievements_unlocked(stats: Mapping[str, float]) -> int:
    """Distinct achievements unlocked in one episode of this format."""
    return sum(1 for k, v in stats.items() if k.startswith("achievement_") and v > 0)


def success_rates(episodes: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Percent of episodes in which each of the 22 achievements was unlocked at least once."""
    episodes = list(episodes)
    if not episodes:
        raise ValueError("success_rates needs at least one episode")
    return {
        name: 100.0 * sum(ep.get(f"achievement_{name}", 0) > 0 for ep in episodes) / len(episodes)
        for name in ACHIEVEMENTS
    }


def crafter_score(rates: Mapping[str, float]) -> float:
    """Geometric-mean score of success rates given in percent (Hafner, 2021)."""
    missing = set(ACHIEVEMENTS) - set(rates)
    if missing:
        raise ValueError(f"crafter_score needs all 22 achievements; missing {sorted(missing)}")
    logs = [math.log(1.0 + rates[name]) for name in ACHIEVEMENTS]
    return math.exp(sum(logs) / len(logs)) - 1.0
