"""What the figures and tables show, computed per run, then summarised over a method's runs
(mean, std with ddof=0, min, max and the runs behind each point)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ellm_tools.report.runs import SCORED, Run, cfg_get

Points = dict[int, float]  # frame -> value


@dataclass
class Curve:
    """One method's line: at each frame, the summary over the runs that reached it."""

    method: str
    frames: list[int]
    mean: list[float]
    std: list[float]
    min: list[float]
    max: list[float]
    n_runs: list[int]
    runs: dict[str, Points] = field(default_factory=dict)  # run name -> its own points

    def as_dict(self) -> dict:
        return asdict(self)


def by_method(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs grouped by method, each in seed order, so that per-seed values read alike however
    the paths were given."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.method].append(run)
    return {m: sorted(g, key=lambda r: (r.seed is None, r.seed or 0)) for m, g in groups.items()}


AGENT_INPUTS = ("use_goal", "use_language_state")


def pooling_warnings(runs: Sequence[Run]) -> list[str]:
    """What would make a method's mean misleading: runs of different budgets or agent inputs,
    or one seed counted twice (e.g. two experiments of one method read together)."""
    warnings = []
    for method, group in by_method([r for r in runs if r.has_data]).items():
        budgets = sorted({int(cfg_get(r.config, "num_train_frames")) for r in group})
        if len(budgets) > 1:
            warnings.append(f"{method}: runs of different budgets pooled "
                            f"(num_train_frames {', '.join(map(str, budgets))}); "
                            "--group-by num_train_frames keeps them apart")
        for key in AGENT_INPUTS:
            values = sorted({repr(cfg_get(r.config, key)) for r in group if key in r.config})
            if len(values) > 1:
                warnings.append(f"{method}: runs of different agents pooled ({key} "
                                f"{', '.join(values)}); --group-by {key} keeps them apart")
        seeds = [r.seed for r in group]
        repeated = sorted({s for s in seeds if seeds.count(s) > 1 and s is not None})
        if repeated:
            warnings.append(f"{method}: seed {', '.join(map(str, repeated))} appears more than "
                            "once; --group-by exp_name keeps experiments apart")
    return warnings


def curves(runs: Sequence[Run], points: Callable[[Run], Points]) -> list[Curve]:
    out = []
    for method, group in by_method(runs).items():
        per_run = {run.name: points(run) for run in group}
        per_run = {name: pts for name, pts in per_run.items() if pts}
        if not per_run:
            continue
        frames = sorted({f for pts in per_run.values() for f in pts})
        cols = [[pts[f] for pts in per_run.values() if f in pts] for f in frames]
        out.append(Curve(
            method=method, frames=frames,
            mean=[float(np.mean(c)) for c in cols], std=[float(np.std(c)) for c in cols],
            min=[float(np.min(c)) for c in cols], max=[float(np.max(c)) for c in cols],
            n_runs=[len(c) for c in cols], runs=per_run))
    return out


def unlocked(episode: Mapping[str, float]) -> int:
    """Achievements unlocked in an episode (= its game reward without the health term)."""
    return sum(1 for k, v in episode.items() if k.startswith("achievement_") and v > 0)


def _by_frame(episodes: Sequence[Mapping[str, float]]) -> dict[int, list[Mapping[str, float]]]:
    groups: dict[int, list[Mapping[str, float]]] = defaultdict(list)
    for ep in episodes:
        if "frame" in ep:
            groups[int(ep["frame"])].append(ep)
    return dict(sorted(groups.items()))


def eval_achievements(run: Run) -> Points:
    """Achievements unlocked per evaluation episode, averaged per evaluation."""
    groups = _by_frame(run.eval_episodes)
    if groups:
        return {f: float(np.mean([unlocked(ep) for ep in eps])) for f, eps in groups.items()}
    return {int(r["frame"]): r["episode_reward"] for r in run.csvs.get("eval", [])
            if "episode_reward" in r}


def train_achievements(bin_frames: int | None = None) -> Callable[[Run], Points]:
    """Achievements unlocked per training episode, averaged over bins labelled by their end."""

    def points(run: Run) -> Points:
        width = int(bin_frames or cfg_get(run.config, "eval_every_frames"))
        bins: dict[int, list[int]] = defaultdict(list)
        for ep in run.train_episodes:
            if "frame" in ep:
                end = -(-int(ep["frame"]) // width) * width  # ceil to the bin's end
                bins[end].append(unlocked(ep))
        return {f: float(np.mean(v)) for f, v in sorted(bins.items())}

    return points


def last_eval_episodes(run: Run, last_evals: int = 1) -> list[Mapping[str, float]]:
    """The episodes of the run's latest ``last_evals`` evaluations, pooled."""
    groups = list(_by_frame(run.eval_episodes).values())[-last_evals:]
    return [ep for eps in groups for ep in eps]


@dataclass
class MethodScores:
    method: str
    runs: list[str]
    seeds: list[int | None]
    frames: list[int]
    eval_frames: list[int]                    # frame of each run's last evaluation
    eval_achievements: list[float]
    eval_score: list[float]                   # Crafter score (%)
    train_score: list[float]
    eval_rates: dict[str, float]              # mean over runs, percent
    train_rates: dict[str, float]
    eval_episodes: list[int]
    train_episodes: list[int]
    # single-task runs: per run, % of the last evaluations' episodes that did the whole task
    eval_task_success: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def scores(runs: Sequence[Run], last_evals: int = 1) -> list[MethodScores]:
    """Crafter score and success rates per method, of the last evaluations and of all training
    episodes (Crafter's own protocol)."""
    out = []
    for method, group in by_method([r for r in runs if r.has_data]).items():
        ev = [(r, last_eval_episodes(r, last_evals)) for r in group]
        ev = [(r, eps) for r, eps in ev if eps]
        tr = [r for r in group if r.train_episodes]
        eval_rates = [SCORED.success_rates(eps) for _, eps in ev]
        train_rates = [SCORED.success_rates(r.train_episodes) for r in tr]
        out.append(MethodScores(
            method=method, runs=[r.name for r in group], seeds=[r.seed for r in group],
            frames=[r.frames for r in group],
            eval_frames=[int(eps[-1]["frame"]) for _, eps in ev],
            eval_achievements=[float(np.mean([unlocked(ep) for ep in eps])) for _, eps in ev],
            eval_score=[SCORED.score(rates) for rates in eval_rates],
            train_score=[SCORED.score(rates) for rates in train_rates],
            eval_rates=_mean_rates(eval_rates), train_rates=_mean_rates(train_rates),
            eval_episodes=[len(eps) for _, eps in ev],
            train_episodes=[len(r.train_episodes) for r in tr],
            eval_task_success=[100.0 * v for r in group if (v := _tail_mean(
                r.csvs.get("eval", []), "task_success", last_evals)) is not None]))
    return out


def _mean_rates(rates: Sequence[Mapping[str, float]]) -> dict[str, float]:
    if not rates:
        return {}
    return {name: float(np.mean([r[name] for r in rates])) for name in SCORED.achievements}


LM_COUNTERS = ("queries", "api_calls", "cache_hits", "cache_misses", "prompt_tokens",
               "completion_tokens", "dollars")


def lm_totals(run: Run) -> tuple[int, dict[str, float]]:
    """(frames covered, totals of ``lm.csv``): older run dirs restart the counters at 0 on
    resume, so a drop in ``queries`` starts a part and the totals add up the parts."""
    rows = run.csvs.get("lm", [])
    if not rows:
        return 0, {}
    totals = dict.fromkeys(LM_COUNTERS, 0.0)
    previous: dict[str, float] = {}
    for row in rows:
        if previous and row.get("queries", 0.0) < previous.get("queries", 0.0):
            for k in LM_COUNTERS:
                totals[k] += previous.get(k, 0.0)
        previous = row
    for k in LM_COUNTERS:
        totals[k] += previous.get(k, 0.0)
    return int(rows[-1]["frame"]), totals


@dataclass
class LMUsage:
    """Per-method LM cost, per 1M frames, summed over runs."""

    method: str
    runs: int
    frames: int
    queries_per_1m: float
    api_calls_per_1m: float
    cache_hit_rate: float | None
    tokens_per_1m: float
    dollars_per_1m: float
    dollars: float

    def as_dict(self) -> dict:
        return asdict(self)


def lm_usage(runs: Sequence[Run]) -> list[LMUsage]:
    out = []
    for method, group in by_method([r for r in runs if r.uses_lm]).items():
        totals = dict.fromkeys(LM_COUNTERS, 0.0)
        frames = n = 0
        for run in group:
            f, t = lm_totals(run)
            if not f:
                continue
            frames, n = frames + f, n + 1
            for k in LM_COUNTERS:
                totals[k] += t.get(k, 0.0)
        if not frames:
            continue
        per_1m = 1e6 / frames
        lookups = totals["cache_hits"] + totals["cache_misses"] + totals["api_calls"]
        out.append(LMUsage(
            method=method, runs=n, frames=frames,
            queries_per_1m=totals["queries"] * per_1m,
            api_calls_per_1m=totals["api_calls"] * per_1m,
            cache_hit_rate=totals["cache_hits"] / totals["queries"]
            if lookups and totals["queries"] else None,
            tokens_per_1m=(totals["prompt_tokens"] + totals["completion_tokens"]) * per_1m,
            dollars_per_1m=totals["dollars"] * per_1m, dollars=totals["dollars"]))
    return out


COLLAPSE = ("action_entropy", "top_action_share", "noop_share")
EXPLORATION = ("coverage", "distinct_captions")  # logged by runs since they were added
DIAGNOSTICS = COLLAPSE + EXPLORATION
TRAIN_TAIL = 0.1  # the training episodes the diagnostics table reads: the run's last 10%


@dataclass
class MethodDiagnostics:
    """How varied a method's actions are and how much of the world it reaches, per run."""

    method: str
    eval: dict[str, list[float]] = field(default_factory=dict)  # diagnostic -> one per run
    train: dict[str, list[float]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def _tail_mean(rows: Sequence[Mapping[str, float]], key: str, count: int) -> float | None:
    values = [float(r[key]) for r in rows if key in r and r[key] == r[key]]
    return float(np.mean(values[-count:])) if values else None


def diagnostics(runs: Sequence[Run], last_evals: int = 1) -> list[MethodDiagnostics]:
    out = []
    for method, group in by_method([r for r in runs if r.has_data]).items():
        row = MethodDiagnostics(method)
        for run in group:
            train = run.csvs.get("train", [])
            tail = max(1, int(len(train) * TRAIN_TAIL))
            for kind, rows, count in (("eval", run.csvs.get("eval", []), last_evals),
                                      ("train", train, tail)):
                for key in DIAGNOSTICS:
                    value = _tail_mean(rows, key, count)
                    if value is not None:
                        getattr(row, kind).setdefault(key, []).append(value)
        if row.eval or row.train:
            out.append(row)
    return out


def metric_key(run: Run, metric: str) -> str | None:
    """The logged ``<namespace>/<metric>`` column of a run, eval first, exact names first."""
    order = ("eval", run.game.name, "train")
    spaces = sorted(run.csvs, key=lambda ns: (order + (ns,)).index(ns))
    columns = [(ns, key) for ns in spaces for key in dict.fromkeys(k for r in run.csvs[ns] for k in r)]
    for exact in (True, False):
        for ns, key in columns:
            if key == metric if exact else metric in key:
                return f"{ns}/{key}"
    return None


def metric_curve(metric: str) -> Callable[[Run], Points]:

    def points(run: Run) -> Points:
        key = metric_key(run, metric)
        if key is None:
            return {}
        ns, _, name = key.partition("/")
        return {int(r["frame"]): r[name] for r in run.csvs[ns] if name in r}

    return points


def episode_curve(namespace: str) -> Callable[[Run], Points]:
    """A run's ``return`` against ``episodes`` from ``<namespace>.csv``'s rows that have both."""

    def points(run: Run) -> Points:
        return {int(r["episodes"]): r["return"] for r in run.csvs.get(namespace, [])
                if "episodes" in r and "return" in r}

    return points


@dataclass
class ReturnScores:
    method: str
    runs: list[str]
    episodes: list[int]              # per run
    best_return: list[float]         # the highest return of one iteration
    eval_return: list[float]         # the last evaluation's
    eval_success: list[float]

    def as_dict(self) -> dict:
        return asdict(self)


def return_scores(runs: Sequence[Run]) -> list[ReturnScores]:
    """The return table of the runs that log ``iteration.csv`` (the LLM optimisers)."""
    out = []
    played = [r for r in runs if any("return" in row for row in r.csvs.get("iteration", []))]
    for method, group in by_method(played).items():
        evals = [rows[-1] for r in group if (rows := [e for e in r.csvs.get("eval", [])
                                                      if "return" in e])]
        out.append(ReturnScores(
            method=method, runs=[r.name for r in group], episodes=[r.episodes for r in group],
            best_return=[max(row["return"] for row in r.csvs["iteration"] if "return" in row)
                         for r in group],
            eval_return=[e["return"] for e in evals],
            eval_success=[e["success_rate"] for e in evals if "success_rate" in e]))
    return out
