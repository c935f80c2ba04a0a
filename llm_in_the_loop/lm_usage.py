"""What the two LLM-optimiser runs (policy search, code as policy) write alike: the report plots
``return`` against ``episodes`` of ``iteration.csv`` for any run that has them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lmclient.client import LMClient

# Per-iteration differences of these cumulative client counters.
_COUNTED = ("api_calls", "cache_hits", "prompt_tokens", "completion_tokens", "parse_errors",
            "api_errors", "budget_refusals")


class LMUsage:
    """One iteration's LM calls, tokens and latency, from the client's cumulative counters."""

    def __init__(self, client: LMClient | None) -> None:
        self.client = client
        self._before = self._now()

    def _now(self) -> dict[str, float]:
        if self.client is None:
            return {}
        m = self.client.metrics()
        return {**{k: m[k] for k in _COUNTED}, "seconds": m["latency_s"] * m["api_calls"]}

    def step(self) -> dict[str, float]:
        """``lm_<counter>`` increments since the last call; ``lm_latency_s`` per API call."""
        if self.client is None:
            return {}
        now = self._now()
        diff = {k: now[k] - self._before.get(k, 0.0) for k in now}
        self._before = now
        seconds = diff.pop("seconds")
        out = {f"lm_{k}": v for k, v in diff.items()}
        out["lm_latency_s"] = seconds / diff["api_calls"] if diff["api_calls"] else 0.0
        return out

    def totals(self) -> dict[str, float]:
        """The client's cumulative counters as ``lm/<counter>`` (the report's LM table)."""
        if self.client is None:
            return {}
        return {f"lm/{k}": v for k, v in self.client.metrics().items()}


def namespaced(namespace: str, row: Mapping[str, Any]) -> dict[str, float]:
    return {f"{namespace}/{k}": float(v) for k, v in row.items()}


def lm_summary(client: LMClient) -> str:
    """A run's closing line on its LM: calls, cache hits, tokens, latency and dollars."""
    m = client.metrics()
    return (f"LM: {m['api_calls']:.0f} calls, {m['cache_hits']:.0f} cache hits, "
            f"{m['prompt_tokens'] + m['completion_tokens']:.0f} tokens, "
            f"{m['latency_s']:.2f} s per call, ${m['dollars']:.4f}")
