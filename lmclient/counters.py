"""What a client counts: queries, API calls, cache use, errors, tokens, dollars, latency."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class LMCounters:
    """Counters every suggester reports (docs/lm.md has the glossary)."""

    queries: int = 0
    api_calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    parse_errors: int = 0
    api_errors: int = 0
    retries: int = 0
    budget_refusals: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float = 0.0
    latency_s: float = 0.0
    constrained_requests: int = 0
    constraint_refused: int = 0
    constraint_violations: int = 0

    def as_metrics(self) -> dict[str, float]:
        """Flat float dict; ``latency_s`` becomes the mean per API call."""
        out = {f.name: float(getattr(self, f.name)) for f in fields(self)}
        out["latency_s"] = self.latency_s / self.api_calls if self.api_calls else 0.0
        return out
