"""What a policy search searches and what it has tried, read by both prompt styles."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

# The largest value a setting may hold, in range or not: an answer's 1e308 is no setting (it
# rounds to inf), and the policies here earn finite returns up to this.
MAX_MAGNITUDE: Final = 1e9


@dataclass(frozen=True)
class ParameterSpace:
    """Named real parameters sharing the range [low, high], written with ``decimals`` digits."""

    names: tuple[str, ...]
    low: float
    high: float
    decimals: int = 2

    def __post_init__(self) -> None:
        if not self.names or len(set(self.names)) != len(self.names):
            raise ValueError(f"parameter names must be distinct and non-empty: {self.names}")
        if not self.low < self.high:
            raise ValueError(f"the parameter range [{self.low}, {self.high}] is empty")
        if not max(abs(self.low), abs(self.high)) <= MAX_MAGNITUDE:
            raise ValueError(f"the parameter range [{self.low}, {self.high}] passes "
                             f"{MAX_MAGNITUDE:g} in size")

    @property
    def size(self) -> int:
        return len(self.names)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A setting drawn uniformly from the range, rounded to ``decimals``."""
        return self.round(rng.uniform(self.low, self.high, self.size))

    def round(self, values: Sequence[float], clip: bool = True) -> np.ndarray:
        """``values`` rounded to ``decimals`` and, unless ``clip`` is false, clipped into range."""
        with np.errstate(over="ignore"):  # inf: clipped, or refused by settle
            rounded = np.round(np.asarray(values, dtype=float), self.decimals)
        return np.clip(rounded, self.low, self.high) if clip else rounded

    def clip(self, values: Sequence[float]) -> tuple[np.ndarray, bool]:
        """``values`` rounded and clipped into range, and whether any lay outside it."""
        array = np.asarray(values, dtype=float)
        outside = bool(np.any((array < self.low) | (array > self.high)))
        return self.round(array), outside

    def settle(self, values: Sequence[float], clip: bool) -> tuple[np.ndarray | None, str]:
        """The setting played for proposed ``values`` and its status (docs/optimizers.md)."""
        params, outside = self.clip(values)
        if outside and not clip:
            params = self.round(values, clip=False)
        if not bool(np.all(np.isfinite(params) & (np.abs(params) <= MAX_MAGNITUDE))):
            return None, "unparsable"
        return params, ("clipped" if clip else "out_of_range") if outside else "ok"

    def format(self, values: Sequence[float]) -> str:
        """``w0=1.5, w1=-0.25`` (each value with ``decimals`` digits)."""
        return ", ".join(f"{name}={value:.{self.decimals}f}"
                         for name, value in zip(self.names, values))


@dataclass(frozen=True)
class Entry:
    """One setting tried and the (mean) return it earned; ``order``: when it was added."""

    params: tuple[float, ...]
    ret: float
    order: int


class ParameterBuffer:
    """Every (setting, return) pair of a run, in the order tried."""

    def __init__(self, space: ParameterSpace) -> None:
        self.space = space
        self.entries: list[Entry] = []

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, params: Sequence[float], ret: float) -> Entry:
        if len(params) != self.space.size:
            raise ValueError(f"expected {self.space.size} parameters, got {len(params)}")
        if not all(math.isfinite(v) for v in (*params, ret)):  # a NaN would rank as the best
            raise ValueError(f"a setting and its return must be finite: {params} -> {ret}")
        entry = Entry(tuple(float(p) for p in params), float(ret), len(self.entries))
        self.entries.append(entry)
        return entry

    @property
    def best(self) -> Entry | None:
        """The entry of the highest return (the earliest one on a tie)."""
        return max(self.entries, key=lambda e: (e.ret, -e.order), default=None)

    def shown(self, limit: int) -> list[Entry]:
        """The entries a prompt shows, lowest return first, so the model reads the best last."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        chosen = self.entries
        if len(chosen) > limit:
            ranked = sorted(chosen, key=lambda e: (-e.ret, e.order))
            best = {e.order for e in ranked[:math.ceil(limit / 2)]}
            recent = [e.order for e in reversed(chosen) if e.order not in best]
            keep = best | set(recent[:limit - len(best)])
            chosen = [e for e in chosen if e.order in keep]
        return sorted(chosen, key=lambda e: (e.ret, e.order))

    def render(self, limit: int) -> str:
        """One line per shown entry: ``w0=1.50, w1=-0.25 -> return 12.34``."""
        return "\n".join(f"{self.space.format(e.params)} -> return {e.ret:.2f}"
                         for e in self.shown(limit))
