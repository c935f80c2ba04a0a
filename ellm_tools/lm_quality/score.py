"""Scores of a suggester on the benchmark's states, and their Markdown table; what each column
means is in docs/lm.md, "What a model is worth"."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ellm.games.crafter.oracle import SimpleOracle
from ellm.games.housekeep.goals import AnswerRecord, HousekeepSuggester, answer_metrics
from ellm.lm import GoalSuggester
from ellm_tools.lm_quality.states import CrafterSample, Question
from text_crafter import GOOD_ACTIONS, SYNONYMS
from text_crafter.actions import EASIER_ACTIONS

_COUNTERS = ("queries", "api_calls", "cache_hits", "parse_errors", "api_errors",
             "budget_refusals", "prompt_tokens", "completion_tokens", "dollars",
             "constrained_requests", "constraint_violations")


def canonical(goal: str) -> str:
    """One spelling per game action: the oracle's ("eat cow" -> "attack cow")."""
    return goal if goal in EASIER_ACTIONS else SYNONYMS.get(goal, goal)


def score_crafter(suggester: GoalSuggester, samples: Sequence[CrafterSample],
                  oracle: SimpleOracle) -> dict[str, Any]:
    """Goals of ``suggester`` for each sample against ``oracle``'s, each state asked alone."""
    suggested = matched = expected = named = 0
    meter = _Meter(suggester.metrics)
    for sample in samples:
        suggester.reset()
        with meter:
            goals = suggester.suggest(sample.state)
        named += sum(goal in GOOD_ACTIONS for goal in goals)
        mine = {canonical(g) for g in goals}
        truth = {canonical(g) for g in oracle.suggest(sample.state)}
        suggested += len(mine)
        expected += len(truth)
        matched += len(mine & truth)
        meter.goals += len(goals)
    return {
        "states": len(samples),
        "goals_per_state": meter.goals / len(samples) if samples else math.nan,
        "action_share": _ratio(named, meter.goals),
        "precision": _ratio(matched, suggested),
        "recall": _ratio(matched, expected),
        "matched": matched, "suggested": suggested, "oracle_goals": expected,
        **meter.summary(len(samples)),
    }


def score_housekeep(suggester: HousekeepSuggester,
                    questions: Sequence[Question]) -> dict[str, Any]:
    """Yes/no answers of ``suggester``'s answerer against the ground truth (Novelty: all yes)."""
    meter = _Meter(suggester.metrics)
    records: dict[tuple[int, ...], AnswerRecord] = {}
    for i, q in enumerate(questions):
        with meter:
            answer = (True if suggester.answerer is None
                      else suggester.answerer.answer(q.view, q.obj, q.rec))
        if answer is not None:
            records[(i,)] = AnswerRecord(answer, q.truth)
    scores = answer_metrics([records])
    return {
        "questions": len(questions),
        "yes_share": _ratio(sum(q.truth for q in questions), len(questions)),
        "accuracy": scores["lm_accuracy"], "precision": scores["lm_precision"],
        "recall": scores["lm_recall"], "unanswered": len(questions) - len(records),
        **meter.summary(len(questions)),
    }


class _Meter:
    """Per-query deltas of a suggester's counters."""

    def __init__(self, metrics) -> None:
        self._metrics = metrics
        self._start: Mapping[str, float] = {}
        self.first = self._totals()
        self.seconds: list[float] = []  # API seconds of each query that made a request
        self.goals = 0

    def _totals(self) -> dict[str, float]:
        m = self._metrics()
        return {**{k: float(m.get(k, 0.0)) for k in _COUNTERS},
                "api_seconds": float(m.get("latency_s", 0.0)) * float(m.get("api_calls", 0.0))}

    def __enter__(self) -> None:
        self._start = self._totals()

    def __exit__(self, *_: object) -> None:
        end = self._totals()
        if end["api_calls"] > self._start["api_calls"]:
            self.seconds.append(end["api_seconds"] - self._start["api_seconds"])

    def summary(self, n: int) -> dict[str, Any]:
        """Counter totals, latency percentiles and per-query cost (NaN when undefined)."""
        total = {k: v - self.first[k] for k, v in self._totals().items()}
        asked = len(self.seconds)  # queries the API answered (or tried to)
        tokens = total["prompt_tokens"] + total["completion_tokens"]
        return {
            **{k: int(total[k]) for k in _COUNTERS if k != "dollars"},
            "dollars": total["dollars"],
            "api_queries": asked,
            "latency_p50_s": float(np.percentile(self.seconds, 50)) if asked else math.nan,
            "latency_p95_s": float(np.percentile(self.seconds, 95)) if asked else math.nan,
            "tokens_per_query": tokens / asked if asked else math.nan,
            "dollars_per_1k": 1000 * total["dollars"] / asked if asked else math.nan,
        }


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


CRAFTER_HEADER = ("| suggester | states | names an action | precision | recall | parse errors "
                  "| goals/state | latency p50 / p95 (s) | tokens/state | $ / 1k states |\n"
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
HOUSEKEEP_HEADER = ("| answerer | questions (yes) | accuracy | precision | recall | unanswered "
                    "| parse errors | latency p50 / p95 (s) | tokens/question "
                    "| $ / 1k questions |\n"
                    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")


def _num(value: float, digits: int = 2) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _cost(scores: Mapping[str, Any]) -> list[str]:
    latency = ("–" if math.isnan(scores["latency_p50_s"]) else
               f"{_num(scores['latency_p50_s'])} / {_num(scores['latency_p95_s'])}")
    return [latency, _num(scores["tokens_per_query"], 0), _num(scores["dollars_per_1k"], 3)]


def crafter_row(label: str, s: Mapping[str, Any]) -> str:
    cells = [label, str(s["states"]), _num(s["action_share"]), _num(s["precision"]),
             _num(s["recall"]), str(s["parse_errors"]), _num(s["goals_per_state"], 1),
             *_cost(s)]
    return "| " + " | ".join(cells) + " |"


def housekeep_row(label: str, s: Mapping[str, Any]) -> str:
    yes = round(s["yes_share"] * s["questions"]) if s["questions"] else 0
    cells = [label, f"{s['questions']} ({yes})", _num(s["accuracy"]), _num(s["precision"]),
             _num(s["recall"]), str(s["unanswered"]), str(s["parse_errors"]), *_cost(s)]
    return "| " + " | ".join(cells) + " |"
