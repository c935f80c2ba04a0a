"""Episode records in Crafter's ``stats.jsonl`` format, which every game's runs write: one JSON
object per line and per episode, ``{"length": 400, "reward": 3.0, "achievement_<name>": 2}``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path


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
