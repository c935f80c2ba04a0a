"""``python -m ellm_tools.report.intervals RUN_DIR...``: each method's last-evaluation metrics as
the mean over seeds with a 95% Student-t confidence interval, the per-seed values beside it
(``--achievements``: each achievement's success rate too; ``--at FRAME``: the last evaluation
at or before FRAME instead of the last one).

The interval is mean +- t(0.975, n-1) * s / sqrt(n), s the sample standard deviation (ddof=1)
over the seeds' values; each seed's value is its last evaluation's mean over its episodes."""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ellm_tools.report.runs import NotARunDir, load_runs, method_name

METRICS = (("episode_reward", "achievements / episode"),
           ("achievements_without_wake_up", "without wake_up"),
           ("score", "Crafter score %"), ("coverage", "coverage (cells)"),
           ("game_return", "game return"))
# Two-sided 95% quantiles of Student's t by degrees of freedom (1..30); beyond, the normal's.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% t-interval; a single value has no interval (nan bounds)."""
    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return mean, math.nan, math.nan
    half = (T975[n - 2] if n - 1 <= len(T975) else 1.960) * float(np.std(values, ddof=1)) \
        / math.sqrt(n)
    return mean, mean - half, mean + half


def _at(rows: Sequence[dict], frame: int | None) -> dict | None:
    """The last row at or before ``frame`` (the last row when None)."""
    kept = [r for r in rows if frame is None or float(r["frame"]) <= frame]
    return kept[-1] if kept else None


def rows(paths: Sequence[str], achievements: bool = False, at: int | None = None) -> list[str]:
    by_method: dict[str, list] = defaultdict(list)
    for run in load_runs(paths):
        if run.csvs.get("eval"):
            by_method[method_name(run.config)].append(run)
    lines = ["| method | metric | mean [95% CI] | seeds: values |", "| --- | --- | --- | --- |"]
    for method, runs in sorted(by_method.items()):
        runs.sort(key=lambda r: r.config.get("seed", 0))
        metrics = [("eval", key, label) for key, label in METRICS]
        if achievements:
            names = sorted({k for r in runs for row in r.csvs.get("achievements", [])[-1:]
                            for k in row if k != "frame"})
            metrics += [("achievements", name, f"success % {name}") for name in names]
        for csv, key, label in metrics:
            last = [_at(r.csvs.get(csv, []), at) for r in runs]
            values = [float(row[key]) for row in last if row and row.get(key) not in (None, "")]
            if not values:
                continue
            mean, low, high = interval(values)
            seeds = ", ".join(f"{v:.2f}" for v in values)
            frames = sorted({int(float(row["frame"])) for row in last if row})
            where = "" if at is None else f" @ {', '.join(map(str, frames))}"
            lines.append(f"| {method} | {label}{where} | {mean:.2f} [{low:.2f}, {high:.2f}] | "
                         f"{len(values)}: {seeds} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run, sweep or Craftax run directories")
    parser.add_argument("--achievements", action="store_true",
                        help="also each achievement's success rate (achievements.csv)")
    parser.add_argument("--at", type=int, default=None, metavar="FRAME",
                        help="the last evaluation at or before FRAME (default: the last)")
    args = parser.parse_args(argv)
    try:
        print("\n".join(rows(args.runs, args.achievements, args.at)))
    except NotARunDir as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
