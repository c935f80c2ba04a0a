"""Bounded readers of a run's records (``config.json``, the CSVs, ``stats.jsonl``): a run
directory may come from anyone, so a file the report cannot read skips that run, not the report.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

# Far above the records of any run (a 5M-frame run's CSVs are a few MB), far below memory.
MAX_FILE_BYTES = 256 * 2**20
# Frames, episodes and seeds: exact as floats, and within numpy's int64.
MAX_COUNT = 2**53
# Config keys the report turns into integers, with their least valid value.
CONFIG_COUNTS: dict[str, int] = {"seed": -MAX_COUNT, "num_train_frames": 0,
                                 "eval_every_frames": 1, "num_train_episodes": 0}
CSV_COUNTS = ("frame", "episodes")

Row = dict[str, float]


class UnreadableRun(ValueError):
    """A record of a run directory that is not what a run writes; the report skips the run."""

    def __init__(self, file: Path, line: int | None, why: str):
        self.file, self.line, self.why = file, line, why
        self.run: Path | None = None  # the run directory, once known
        super().__init__(f"{file}{self._at()}: {why}")

    def _at(self) -> str:
        return f" line {self.line}" if self.line else ""

    @property
    def short(self) -> str:
        if self.run is None or self.run not in self.file.parents:
            return f"{self.file.name}{self._at()}: {self.why}"
        name = f"{self.run.parent.name}/{self.run.name}/{self.file.relative_to(self.run)}"
        return f"{name}{self._at()}: {self.why}"


def read_text(path: Path) -> str:
    """The file as text (bad UTF-8 replaced), refused past :data:`MAX_FILE_BYTES`."""
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UnreadableRun(path, None, f"larger than {MAX_FILE_BYTES // 2**20} MiB, far more "
                            "than a run's records")
    return data.decode("utf-8", errors="replace")


def number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def _count(value: Any, low: int = 0) -> float | None:
    x = number(value)
    return x if x is not None and low <= x <= MAX_COUNT else None


def read_config(path: Path) -> dict[str, Any]:
    """``config.json`` as a dict whose counts (:data:`CONFIG_COUNTS`) are integers."""
    text = read_text(path)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableRun(path, exc.lineno, f"not valid JSON: {exc.msg}") from None
    except (RecursionError, ValueError) as exc:  # nesting past Python's stack; a 5000-digit int
        raise UnreadableRun(path, None, _not_json(exc)) from None
    if not isinstance(config, dict):
        raise UnreadableRun(path, None, f"holds a {type(config).__name__}, expected a JSON "
                            "object (the run's config)")
    for key, low in CONFIG_COUNTS.items():
        if key not in config or (key == "seed" and config[key] is None):
            continue
        value = _count(config[key], low)
        if value is None or isinstance(config[key], str):
            raise UnreadableRun(path, _line_of(text, key), f"{key}={_short(config[key])} is not "
                                f"an integer in [{'-2**53' if low < 0 else low}, 2**53]")
        config[key] = int(value)
    return config


def read_csv(path: Path) -> list[Row]:
    """Rows of a logger CSV as floats; a torn last line (a run still writing) is dropped."""
    text = read_text(path)
    if text and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = []
    try:  # csv's own field limit (128 KiB) bounds each cell
        header = next(reader, [])
        for values in reader:
            if not values:
                continue
            if len(values) != len(header):
                raise UnreadableRun(path, reader.line_num, f"{len(values)} cells under a header "
                                    f"of {len(header)}")
            row = _row(path, reader.line_num, header, values)
            if "frame" in row:
                rows.append(row)
    except csv.Error as exc:
        raise UnreadableRun(path, reader.line_num, f"not CSV: {exc}") from None
    return rows


def _row(path: Path, line: int, header: list[str], values: list[str]) -> Row:
    row = {}
    for key, cell in zip(header, values):
        value = number(cell)
        if key in CSV_COUNTS and cell.strip() and _count(cell) is None:
            raise UnreadableRun(path, line, f"{key}={_short(cell)} is not a count in [0, 2**53]")
        if key and value is not None:
            row[key] = value
    return row


def read_episodes(path: Path) -> list[dict[str, float]]:
    """The episodes of a ``stats.jsonl``, finite numbers only; torn lines are dropped."""
    episodes = []
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            episode = json.loads(line)
        except json.JSONDecodeError:
            continue
        except (RecursionError, ValueError) as exc:
            raise UnreadableRun(path, n, _not_json(exc)) from None
        if not isinstance(episode, dict):
            continue
        frame = episode.get("frame", 0)
        if not isinstance(frame, int | float) or _count(frame) is None:
            raise UnreadableRun(path, n, f"frame={_short(episode['frame'])} is not a count in "
                                "[0, 2**53]")
        episodes.append({str(k): x for k, v in episode.items()
                         if isinstance(v, int | float) and (x := number(v)) is not None})
    return episodes


def _line_of(text: str, key: str) -> int | None:
    """The line of the top-level ``"key":`` in a JSON text, to point the reader at it."""
    found = []
    for match in re.finditer(rf'"{re.escape(key)}"\s*:', text):
        start = text.rfind("\n", 0, match.start()) + 1
        before = text[start:match.start()]
        found.append((len(before) - len(before.lstrip()), text.count("\n", 0, start) + 1))
    return min(found)[1] if found else None


def _not_json(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "JSON nested deeper than the report reads"
    return f"not JSON a run writes: {_short(exc)}"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, BaseException) else str(value)
    return text if len(text) <= limit else f"{text[:limit]}..."
