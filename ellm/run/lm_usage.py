"""What a run's LMs were asked and cost; a resumed run counts on from its earlier parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LM_FLAGS = ("budget_exhausted", "constraint_refused")
LM_GAUGES = ("budget_exhausted", "constraint_refused", "in_flight")


def pool_lm_metrics(parts: list[Mapping[str, float]]) -> dict[str, float]:
    """LM counters of several goal sources as one (latency weighed by API calls, flags OR-ed)."""
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0.0) + value
    calls = out.get("api_calls", 0.0)
    if "latency_s" in out:
        weighted = sum(p.get("latency_s", 0.0) * p.get("api_calls", 0.0) for p in parts)
        out["latency_s"] = weighted / calls if calls else 0.0
    for flag in LM_FLAGS:
        if flag in out:
            out[flag] = max(p.get(flag, 0.0) for p in parts)
    return out


def lm_counts_on(before: Mapping[str, float], part: Mapping[str, float]) -> dict[str, float]:
    """A resumed run's LM counters: ``part``'s added to ``before``'s; gauges are ``part``'s alone.
    """
    if not before:
        return dict(part)
    totals = pool_lm_metrics([before, part])
    for key in LM_GAUGES:
        if key in part:
            totals[key] = part[key]
        else:
            totals.pop(key, None)
    return totals


class LMUsage:
    """The run's LM counters and dollars (budget entries taken once: one ledger per process)."""

    def __init__(self, goals: Any, eval_goals: Any, *, pooled: bool,
                 before: Mapping[str, float] | None = None, spent_before: float = 0.0):
        self.goals, self.eval_goals, self.pooled = goals, eval_goals, pooled
        self.before, self.spent_before = dict(before or {}), float(spent_before)
        self.logged = self.metrics()

    def part(self) -> dict[str, float]:
        """The counters of this part of the run (since its start or resumption)."""
        if self.pooled:
            return self.goals.metrics()
        evaluation = {k: v for k, v in self.eval_goals.metrics().items()
                      if not k.startswith("budget_")}
        return pool_lm_metrics([self.goals.metrics(), evaluation])

    def counts(self) -> dict[str, float]:
        return lm_counts_on(self.before, self.part())

    def metrics(self) -> dict[str, float]:
        return {f"lm/{k}": v for k, v in self.counts().items()}

    def log_now(self) -> dict[str, float]:
        """The lm/ metrics for a row being logged now."""
        self.logged = self.metrics()
        return self.logged

    def spent(self) -> float:
        """Dollars the whole run has spent: its earlier parts' and this part's."""
        return self.spent_before + self.part().get("budget_spent", 0.0)

    def close(self) -> dict[str, float]:
        """Close both sources so in-flight answers are counted; the lm/ metrics if they changed."""
        self.goals.close()
        self.eval_goals.close()
        final = self.metrics()
        return final if final != self.logged else {}


__all__ = ["LMUsage", "lm_counts_on", "pool_lm_metrics"]
