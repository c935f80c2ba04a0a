"""Per-episode statistics in Crafter's ``stats.jsonl`` format, success rates and the score.

One JSON object per line and per episode: ``{"length": 400, "reward": 3.0,
"achievement_collect_wood": 2, ...}`` (the same keys as upstream Crafter's recorder).

The Crafter score (ELLM.md §2.5) is ``exp(mean_i ln(1 + s_i)) - 1`` over the 22 achievements'
success rates ``s_i`` in percent, where a success rate is the percentage of episodes in which
the achievement was unlocked at least once.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import crafter

ACHIEVEMENTS: tuple[str, ...] = tuple(crafter.constants.achievements)


class StatsWriter:
    """Appends one episode per line; each line is flushed and fsynced before returning.

    ``keep_until``: on opening, drop episodes whose ``frame`` key is past this frame (and a
    line torn by a crash), rewriting the file atomically. A training run resumed from a
    snapshot passes the snapshot's frame so the episodes it replays are not counted twice.
    """

    def __init__(self, path: str | Path, keep_until: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if keep_until is not None and self.path.exists():
            kept = [ep for ep in load_stats(self.path) if ep.get("frame", 0) <= keep_until]
            tmp = self.path.with_name(self.path.name + ".tmp")
            with tmp.open("w", encoding="utf-8") as f:
                f.writelines(json.dumps(ep) + "\n" for ep in kept)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def write(self, stats: Mapping[str, float]) -> None:
        line = json.dumps(dict(stats)) + "\n"
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


def load_stats(paths: str | Path | Iterable[str | Path]) -> list[dict[str, float]]:
    """Episodes from one or more ``stats.jsonl`` files; a torn last line (crash) is skipped."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    episodes = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                episodes.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return episodes


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
