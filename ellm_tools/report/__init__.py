"""``python -m ellm_tools.report RUN_OR_SWEEP_DIR... --out DIR``: figures and a Markdown summary of
training runs, grouped by method (README.md, "Reports")."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ellm.games import GAMES
from ellm.run.atomic import write_text
from ellm_tools.report.aggregate import (
    LMUsage,
    MethodDiagnostics,
    MethodScores,
    ReturnScores,
    curves,
    diagnostics,
    episode_curve,
    eval_achievements,
    lm_usage,
    metric_curve,
    metric_key,
    pooling_warnings,
    return_scores,
    scores,
    train_achievements,
)
from ellm_tools.report.copies import UnsafeOutput, output_dir, safe_name
from ellm_tools.report.figures import bar_figure, line_figure
from ellm_tools.report.records import UnreadableRun, number
from ellm_tools.report.runs import SCORED, NotARunDir, Run, cfg_get, load_runs, method_name
from ellm_tools.report.summary import evals_label, render

__all__ = ["NotARunDir", "Report", "Run", "UnreadableRun", "UnsafeOutput", "build_report",
           "load_runs", "method_name"]


@dataclass
class Report:
    runs: list[Run]
    out: Path
    last_evals: int = 1                        # latest evaluations pooled in the score table
    scores: list[MethodScores] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # pooling that could mislead
    lm: list[LMUsage] = field(default_factory=list)
    returns: list[ReturnScores] = field(default_factory=list)  # runs of the LLM optimisers
    diagnostics: list[MethodDiagnostics] = field(default_factory=list)
    figures: dict[str, Path] = field(default_factory=dict)
    skipped: list[UnreadableRun] = field(default_factory=list)  # records unreadable

    @property
    def summary(self) -> Path:
        return self.out / "report.md"


def build_report(paths: Iterable[str | Path], out: str | Path, group_by: Sequence[str] = (),
                 bin_frames: int | None = None, last_evals: int = 1) -> Report:
    """Read the runs under ``paths`` and write the figures and ``report.md`` into ``out``; a run
    whose records cannot be read is left out and named in ``Report.skipped``."""
    out = output_dir(out)
    skipped: list[UnreadableRun] = []
    runs = load_runs(paths, group_by, skipped)
    report = Report(runs=runs, out=out, last_evals=last_evals, skipped=skipped)
    # Runs that log iterations (the LLM optimisers) are reported by return against episodes.
    optimised = [r for r in runs if r.has_data and r.csvs.get("iteration")]
    crafter = [r for r in runs if r.has_data and r.game.scores_achievements
               and r not in optimised]
    report.scores = scores(crafter, last_evals)
    report.returns = return_scores(optimised)
    report.warnings = pooling_warnings(runs)
    report.lm = lm_usage(runs)
    report.diagnostics = diagnostics([r for r in runs if r not in optimised], last_evals)
    _line_figures(report, crafter, bin_frames)
    _return_figures(report, optimised)
    _rate_figures(report)
    write_text(report.summary, render(report))
    _write_json(report)
    return report


def _line_figures(report: Report, crafter: list[Run], bin_frames: int | None) -> None:
    runs, out = report.runs, report.out
    per_point = f"\n({episodes_per_point(runs)})"
    lines = {
        "achievements_eval": (curves(crafter, eval_achievements),
                              "Achievements unlocked per evaluation episode" + per_point,
                              "achievements / episode"),
        "achievements_train": (curves(crafter, train_achievements(bin_frames)),
                               "Achievements unlocked per training episode",
                               "achievements / episode"),
        "collapse_top_action_share": (
            curves([r for r in runs if r.has_data and not r.csvs.get("iteration")],
                   metric_curve("top_action_share")),
            "Share of the most frequent action per evaluation episode (1 = collapsed)" + per_point,
            "top action share"),
        "exploration_coverage": (
            curves([r for r in runs if r.has_data and not r.csvs.get("iteration")],
                   metric_curve("coverage")),
            ("Coverage per evaluation episode (Crafter: map cells visited; Housekeep: "
             "objects and receptacles interacted with)" + per_point), "coverage"),
    }
    for game in (g.report for g in GAMES):
        if game.progress_metric is None:
            continue
        metric, title = game.progress_metric
        played = [r for r in runs if r.has_data and r.game is game]
        lines[f"{game.name}_{metric}"] = (
            curves(played, metric_curve(metric)), title + per_point,
            " / ".join(sorted({k for r in played if (k := metric_key(r, metric))})))
    for name, (series, title, ylabel) in lines.items():
        if series:
            report.figures[name] = line_figure(out / f"{name}.png", series, title, ylabel)


def episodes_per_point(runs: list[Run], what: str = "point") -> str:
    counts = sorted({int(n) for r in runs if r.has_data
                     and (n := number(cfg_get(r.config, "num_eval_episodes"))) is not None})
    shown = " or ".join(map(str, counts)) or "?"
    return f"each {what}: {shown} evaluation episodes of each run"


def _return_figures(report: Report, optimised: list[Run]) -> None:
    for game in dict.fromkeys(r.game for r in optimised):
        played = [r for r in optimised if r.game is game]
        label = game.label or game.name.capitalize()
        stem = safe_name(game.name)  # a name a run recorded: it never leaves ``out``
        for kind, namespace, title in (
                ("return", "iteration", f"{label}: return of each setting or rollout tried"),
                ("eval_return", "eval", f"{label}: evaluation return")):
            series = curves(played, episode_curve(namespace))
            if series:
                report.figures[f"{stem}_{kind}"] = line_figure(
                    report.out / f"{stem}_{kind}.png", series, title, "return",
                    xlabel="training episodes", integer_x=True)


def _rate_figures(report: Report) -> None:
    for kind in ("eval", "train"):
        rates = {s.method: getattr(s, f"{kind}_rates") for s in report.scores}
        rates = {m: r for m, r in rates.items() if r}
        if rates:
            n_runs = {s.method: len(getattr(s, f"{kind}_score")) for s in report.scores}
            what = (f"{evals_label(report.last_evals)}; {episodes_per_point(report.runs, 'bar')}"
                    if kind == "eval" else "all training episodes")
            report.figures[f"success_rates_{kind}"] = bar_figure(
                report.out / f"success_rates_{kind}.png", SCORED.achievements, rates,
                f"Success rates ({what})", "success rate (%)", n_runs)


def _write_json(report: Report) -> None:
    write_text(report.out / "report.json", json.dumps({
        "runs": [{"method": r.method, "seed": r.seed, "frames": r.frames, "status": r.status,
                  "path": r.name} for r in report.runs],  # as report.md names it: no machine paths
        "last_evals": report.last_evals,
        "warnings": report.warnings,
        "skipped": [s.short for s in report.skipped],
        "scores": [s.as_dict() for s in report.scores],
        "diagnostics": [d.as_dict() for d in report.diagnostics],
        "lm": [u.as_dict() for u in report.lm],
        "returns": [r.as_dict() for r in report.returns],
        "figures": {k: p.name for k, p in report.figures.items()},
    }, indent=1) + "\n")
