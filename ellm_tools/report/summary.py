"""The Markdown summary (``report.md``): runs, headline table, figures, LM usage, Housekeep."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ellm.games import GAMES
from ellm_tools.report.aggregate import (
    COLLAPSE,
    EXPLORATION,
    LMUsage,
    MethodDiagnostics,
    MethodScores,
    ReturnScores,
    by_method,
    metric_curve,
)
from ellm_tools.report.runs import Run

if TYPE_CHECKING:
    from ellm_tools.report import Report

GLOSSARY = """\
How to read this:
- *achievements / episode*: distinct Crafter achievements unlocked in an episode (the game
  reward without its health term; the ELLM paper's headline metric), in evaluation episodes
  (epsilon `agent.eval_eps`) at each evaluation, averaged per run, then over runs.
- *Crafter score*: geometric mean of the 22 achievements' success rates,
  `exp(mean ln(1 + s)) - 1` in percent (Hafner, 2021), per run, then averaged over runs.
  "last eval" uses the episodes of the run's latest evaluation ("last K evals": of its K
  latest, pooled; `--last-evals K`); "all training episodes" uses every training episode of
  the run (Crafter's own protocol, exploration included).
- Values are `mean ± std (n runs: each run's value)`, the runs' values listed when there are
  at most three; ± is the population std over runs (ddof=0), so with two runs it is half their
  gap, not a confidence interval. Shaded bands in the figures are mean ± std. Runs still in
  progress count with what they have logged so far.
"""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_MARKUP = re.compile(r"([\\`*\[\]#|~$])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def md(label: object) -> str:
    """A label from a run's records as plain Markdown text, on one line, nothing in it markup."""
    text = _CONTROL.sub(" ", str(label)).strip()
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MARKUP.sub(lambda m: "\\" + m.group(0), text)
    return re.sub(r"^([-+=])|^(\d+)([.)])", lambda m: (
        f"\\{m[1]}" if m[1] else f"{m[2]}\\{m[3]}"), text)


def listed(labels: Sequence[str]) -> str:
    """Labels joined by commas, each quoted where it holds one (``A [task], guided``)."""
    return ", ".join(f'"{md(x)}"' if "," in x else md(x) for x in labels)


def code(label: object, in_table: bool = True) -> str:
    """A label from a run's records as a Markdown code span (where nothing is markup)."""
    text = _CONTROL.sub(" ", str(label))
    if in_table:  # a table splits cells at | even inside code; \| is GFM's way to keep one
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _ms(values: Sequence[float], digits: int = 2) -> str:
    """``mean ± std (n)``, each run's value after it when few: a std of two says little alone."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (1)"
    runs = (": " + ", ".join(f"{v:.{digits}f}" for v in values)
            if len(values) <= SHOWN_RUNS else "")
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f} ({len(values)}{runs})"


SHOWN_RUNS = 3


def _span(values: Sequence[int]) -> str:
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def _seeds(seeds: Sequence[int | None]) -> str:
    ordered = sorted(seeds, key=lambda s: (s is None, s or 0))
    return ", ".join("?" if s is None else str(s) for s in ordered)


def evals_label(last_evals: int) -> str:
    return "last eval" if last_evals == 1 else f"last {last_evals} evals"


def score_columns(last_evals: int) -> tuple[str, ...]:
    evals = evals_label(last_evals)
    return ("method", "seeds", "frames", "last eval at", f"achievements / episode, {evals}",
            f"Crafter score %, {evals}", "Crafter score %, all training episodes")


LM_COLUMNS = ("method", "runs", "frames", "LM queries / 1M frames", "API calls / 1M frames",
              "cache hit rate", "tokens / 1M frames", "$ / 1M frames", "$ spent")
RUN_COLUMNS = ("method", "seed", "frames", "status", "run directory")


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns),
            *("| " + " | ".join(row) + " |" for row in rows)]


def score_table(rows: Sequence[MethodScores], last_evals: int = 1) -> list[str]:
    """The headline table; single-task runs' task success first: they are trained for it."""
    tasks = any(s.eval_task_success for s in rows)
    columns = score_columns(last_evals)
    if tasks:
        columns = (*columns[:4], f"task success %, {evals_label(last_evals)}", *columns[4:])
    return _table(columns, [
        (md(s.method), _seeds(s.seeds), _span(s.frames), _span(s.eval_frames),
         *([_ms(s.eval_task_success) if s.eval_task_success else "-"] if tasks else []),
         _ms(s.eval_achievements), _ms(s.eval_score), _ms(s.train_score)) for s in rows])


def lm_table(rows: Sequence[LMUsage]) -> list[str]:
    return _table(LM_COLUMNS, [
        (md(u.method), str(u.runs), f"{u.frames:,}", f"{u.queries_per_1m:,.0f}",
         f"{u.api_calls_per_1m:,.0f}",
         "n/a (no LM calls)" if u.cache_hit_rate is None else f"{100 * u.cache_hit_rate:.1f}%",
         f"{u.tokens_per_1m:,.0f}", f"{u.dollars_per_1m:.4f}", f"{u.dollars:.4f}") for u in rows])


RETURN_COLUMNS = ("method", "runs", "episodes", "best return", "last eval return",
                  "last eval success rate")


def return_table(rows: Sequence[ReturnScores]) -> list[str]:
    return _table(RETURN_COLUMNS, [
        (md(r.method), str(len(r.runs)), _span(r.episodes), _ms(r.best_return), _ms(r.eval_return),
         _ms(r.eval_success)) for r in rows])


def diagnostics_table(rows: Sequence[MethodDiagnostics],
                      keys: Sequence[str] = COLLAPSE) -> list[str]:
    rows = [r for r in rows if any(k in r.eval or k in r.train for k in keys)]
    columns = ("method", *(f"eval {k.replace('_', ' ')}" for k in keys),
               *(f"train {k.replace('_', ' ')}" for k in keys))
    return _table(columns, [(md(r.method), *(_ms(r.eval.get(k, [])) for k in keys),
                             *(_ms(r.train.get(k, [])) for k in keys)) for r in rows])


def metrics_table(runs: Sequence[Run], metrics: Sequence[str], last_evals: int) -> list[str]:
    """Per method, each logged evaluation metric averaged over the last evaluations."""
    rows = []
    for method, group in by_method(runs).items():
        cells = []
        for metric in metrics:
            values = []
            for run in group:
                points = metric_curve(metric)(run)
                if points:
                    values.append(float(np.mean([points[f] for f in sorted(points)[-last_evals:]])))
            cells.append(_ms(values) if values else "-")
        if any(c != "-" for c in cells):
            rows.append([md(method), _seeds([r.seed for r in group]), *cells])
    return _table(["method", "seeds", *metrics], rows)


def run_table(runs: Sequence[Run]) -> list[str]:
    return _table(RUN_COLUMNS, [
        (md(r.method), "?" if r.seed is None else str(r.seed), f"{r.frames:,}", r.status,
         code(r.name)) for r in runs])


def render(report: Report) -> str:
    runs = report.runs
    with_data = [r for r in runs if r.has_data]
    methods = list(dict.fromkeys(r.method for r in runs))
    out = ["# ELLM run report", "",
           (f"{len(runs)} run directories ({len(with_data)} with data) of {len(methods)} "
            f"methods: {listed(methods)}."),
           "", "## Runs", "", *run_table(runs), ""]
    if report.skipped:
        out += ["**Runs skipped** (their records are not what a run writes):", "",
                *[f"- {md(s.short)}" for s in report.skipped], ""]
    if report.warnings:
        out += ["**Warnings:**", "", *[f"- {md(w)}" for w in report.warnings], ""]
    if not with_data:
        out += ["No run has logged any data yet: nothing to plot.", ""]
        return "\n".join(out)
    out += _achievements(report, with_data) + _returns(report) + _diagnostics(report)
    if report.lm:
        out += ["## LM usage", "", *lm_table(report.lm), "",
                ("Counts are summed over the runs of a method and divided by their frames; the "
                 "cache hit rate is cache hits / LM queries."), ""]
    out += _progress(report, with_data)
    out += ["## Notes", "", GLOSSARY]
    empty = [r for r in runs if not r.has_data]
    if empty:
        out += ["Runs with no data yet (listed above, left out of figures and tables): "
                + ", ".join(code(r.name, in_table=False) for r in empty) + ".", ""]
    return "\n".join(out)


def _achievements(report: Report, with_data: Sequence[Run]) -> list[str]:
    out: list[str] = []
    # not an LLM optimiser, on a game that scores achievements
    trained = [r for r in with_data if not r.csvs.get("iteration") and r.game.scores_achievements]
    if trained or not (report.returns or with_data):
        out += ["## Achievements unlocked per episode", ""]
        if "achievements_eval" in report.figures:
            out += ["Evaluation episodes:", "",
                    "![achievements per eval episode](achievements_eval.png)", ""]
        else:
            out += ["No Crafter evaluation has run yet.", ""]
    if "achievements_train" in report.figures:
        out += ["Training episodes (binned by frames; `--bin-frames N` gives finer bins):", "",
                "![achievements per training episode](achievements_train.png)", ""]
    if report.scores:
        out += ["## Crafter score", "", *score_table(report.scores, report.last_evals), "",
                "Success rate of each achievement (mean over runs):", ""]
        for key, what in (("success_rates_eval", evals_label(report.last_evals)),
                          ("success_rates_train", "all training episodes")):
            if key in report.figures:
                out += [f"![success rates, {what}]({key}.png)", ""]
    return out


def _returns(report: Report) -> list[str]:
    if not report.returns:
        return []
    out = ["## Return against episodes", "", *return_table(report.returns), "",
           ("Runs that search policies with an LLM or at random (policy search, code as "
            "policy). *best return*: the highest return of one iteration (a setting or "
            "rollout tried); *last eval*: the mean return and success rate of the run's "
            "last evaluation."), ""]
    for key, figure in report.figures.items():
        if key.endswith("_return"):
            out += [f"![{key.replace('_', ' ')}]({figure.name})", ""]
    return out


def _diagnostics(report: Report) -> list[str]:
    if not report.diagnostics:
        return []
    span = (f"eval: {evals_label(report.last_evals)}, train: the run's last 10% of training "
            f"episodes")
    collapse = (f"Per episode: *action entropy* (nats) of the distribution of its actions, *top "
                f"action share* of its most frequent action, *no-op share* of the actions the "
                f"game says had no effect; {span}. A policy collapsed onto one action has "
                f"entropy 0 and top share 1; one uniformly random over n actions has entropy ln n "
                f"(Text-Crafter's 139 action names: 4.93; Crafter's own 17 actions: 2.83).")
    exploration = (f"Per episode: *coverage*, how much of the world it reached (Crafter: "
                   f"distinct map cells the player stood on; Housekeep: distinct objects and "
                   f"receptacles picked or placed on), and *distinct captions*, how many "
                   f"different transition captions (effective actions) it produced; {span}.")
    return (_diagnostics_section(report, "Collapse diagnostics", COLLAPSE, collapse,
                                 "collapse_top_action_share", "top action share")
            + _diagnostics_section(report, "Exploration", EXPLORATION, exploration,
                                   "exploration_coverage", "coverage per evaluation episode"))


def _diagnostics_section(report: Report, title: str, keys: Sequence[str], text: str,
                         figure: str, alt: str) -> list[str]:
    table = diagnostics_table(report.diagnostics, keys)
    if len(table) <= 2:  # a header and its rule: no method logs these keys
        return []
    out = [f"## {title}", "", *table, "", text, ""]
    if figure in report.figures:
        out += [f"![{alt}]({figure}.png)", ""]
    return out


def _progress(report: Report, with_data: Sequence[Run]) -> list[str]:
    out: list[str] = []
    for game in (g.report for g in GAMES):
        if game.progress_metric is None or not any(r.game is game for r in with_data):
            continue
        metric, title = game.progress_metric
        figure = f"{game.name}_{metric}"
        out += [f"## {title}", ""]
        played = [r for r in with_data if r.game is game]
        table = metrics_table(played, game.table_metrics, report.last_evals)
        if len(table) > 2:
            out += [*table, "", (f"Each metric's mean over the evaluation episodes of the run's "
                                 f"{evals_label(report.last_evals)}, per run, then over runs."),
                    ""]
        if figure in report.figures:
            out += [f"![{title}]({figure}.png)", ""]
        else:
            out += [(f"The {game.label or game.name} runs log no `{metric}` metric (looked for "
                     f"a `*{metric}` column in every CSV) yet."), ""]
    return out
