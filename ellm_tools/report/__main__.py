"""Command line of the report: ``python -m ellm_tools.report RUN_OR_SWEEP_DIR... --out DIR``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

DESCRIPTION = """\
Figures and a Markdown summary (report.md) of ELLM training runs, grouped by method.
Each PATH is a run directory written by `python train.py` or a directory holding run
directories (a Hydra sweep dir, a date dir, exp_local). Runs still in progress are reported
with what they have logged so far."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ellm_tools.report", description=DESCRIPTION)
    p.add_argument("paths", nargs="+", metavar="PATH", help="run or sweep directories")
    p.add_argument("--out", default=None,
                   help="directory for report.md, PNGs and JSON (default: PATH/report for one "
                        "PATH, else ./report)")
    p.add_argument("--group-by", action="append", default=[], metavar="KEY",
                   help="config key (dotted, e.g. env_spec.threshold, or exp_name to keep "
                        "experiments apart) whose value is added to the method name; repeatable")
    p.add_argument("--bin-frames", type=int, default=None, metavar="N",
                   help="frame bin width of the training-episode curve; smaller gives finer "
                        "curves (default: each run's eval_every_frames)")
    p.add_argument("--last-evals", type=int, default=1, metavar="K",
                   help="pool the episodes of each run's K latest evaluations in the score "
                        "table and success rates (default: 1, the last evaluation)")
    p.add_argument("--copy-runs", action="store_true",
                   help="first copy each run's records (config.json, the CSVs, stats.jsonl; no "
                        "snapshot, replay or log) into OUT/runs/<method>_seed<k> and report "
                        "from the copies, so that `python -m ellm_tools.report OUT/runs --out OUT` "
                        "rebuilds the same report once the run directories are gone")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from ellm_tools.report import NotARunDir, UnsafeOutput, build_report
    from ellm_tools.report.copies import copy_records, output_dir
    from ellm_tools.report.runs import load_runs

    if args.bin_frames is not None and args.bin_frames < 1:
        print("error: --bin-frames must be a positive number of frames", file=sys.stderr)
        return 2
    if args.last_evals < 1:
        print("error: --last-evals must be a positive number of evaluations", file=sys.stderr)
        return 2
    out = args.out or str(Path(args.paths[0]) / "report" if len(args.paths) == 1 else "report")
    paths, skipped = args.paths, []
    try:
        if args.copy_runs:
            output_dir(out)  # before any copy goes in
            paths = copy_records(load_runs(paths, args.group_by, skipped), Path(out) / "runs")
        report = build_report(paths, out, args.group_by, args.bin_frames,
                              args.last_evals)
    except (NotARunDir, UnsafeOutput) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for unreadable in skipped + report.skipped:
        print(f"warning: run skipped, its records cannot be read: {unreadable}", file=sys.stderr)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    with_data = sum(r.has_data for r in report.runs)
    print(f"{len(report.runs)} runs ({with_data} with data), "
          f"{len(report.figures)} figures -> {report.summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
