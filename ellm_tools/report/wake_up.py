"""``python -m ellm_tools.report.wake_up RUN_DIR... --last-evals K``: each method's achievements
per evaluation episode with and without ``achievement_wake_up``, from the runs' eval/stats.jsonl.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

import numpy as np

from ellm_tools.report.aggregate import by_method, last_eval_episodes, unlocked
from ellm_tools.report.runs import NotARunDir, Run, load_runs

WAKE_UP = "achievement_wake_up"


def without_wake_up(episode: Mapping[str, float]) -> int:
    return unlocked(episode) - int(episode.get(WAKE_UP, 0) > 0)


def run_values(run: Run, last_evals: int) -> tuple[float, float, int] | None:
    """(with, without wake_up, episodes) over the run's latest ``last_evals`` evaluations."""
    episodes = last_eval_episodes(run, last_evals)
    if not episodes:
        return None
    return (float(np.mean([unlocked(ep) for ep in episodes])),
            float(np.mean([without_wake_up(ep) for ep in episodes])), len(episodes))


def _cell(values: Sequence[float]) -> str:
    seeds = ", ".join(f"{v:.2f}" for v in values)
    return f"{np.mean(values):.2f} ± {np.std(values):.2f} ({len(values)}: {seeds})"


def table(runs: Sequence[Run], last_evals: int) -> list[str]:
    """One Markdown row per method: with wake_up, without it, and wake_up's share of them."""
    lines = [(f"| method | seeds | achievements / eval episode, last {last_evals} evals | "
              "without wake_up | wake_up's share | episodes per run |"),
             "| --- | --- | --- | --- | --- | --- |"]
    for method, group in by_method(runs).items():
        found = [(r, v) for r in group if (v := run_values(r, last_evals)) is not None]
        if not found:
            continue
        with_, without = [v[0] for _, v in found], [v[1] for _, v in found]
        share = 1 - np.mean(without) / np.mean(with_) if np.mean(with_) > 0 else 0.0
        seeds = ", ".join(str(r.seed) for r, _ in found)
        episodes = ", ".join(str(v[2]) for _, v in found)
        lines.append(f"| {method} | {seeds} | {_cell(with_)} | {_cell(without)} | "
                     f"{100 * share:.0f}% | {episodes} |")
    return lines


def curve(runs: Sequence[Run]) -> list[str]:
    lines = []
    for run in runs:
        frames = sorted({int(ep["frame"]) for ep in run.eval_episodes if "frame" in ep})
        points = []
        for frame in frames:
            eps = [ep for ep in run.eval_episodes if ep.get("frame") == frame]
            points.append(f"{frame}: {np.mean([unlocked(e) for e in eps]):.2f} / "
                          f"{np.mean([without_wake_up(e) for e in eps]):.2f}")
        lines.append(f"{run.name} (with / without wake_up): {'; '.join(points)}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.report.wake_up",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="run or sweep directories")
    parser.add_argument("--last-evals", type=int, default=1, metavar="K",
                        help="pool each run's K latest evaluations (default 1)")
    parser.add_argument("--group-by", action="append", default=[], metavar="KEY",
                        help="config key added to the method name, as the report's; repeatable")
    parser.add_argument("--curve", action="store_true",
                        help="list every evaluation of every run instead of the table")
    args = parser.parse_args(argv)
    if args.last_evals < 1:
        print("error: --last-evals must be a positive number of evaluations", file=sys.stderr)
        return 2
    try:
        runs = load_runs(args.paths, args.group_by)
    except NotARunDir as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(curve(runs) if args.curve else table(runs, args.last_evals)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
