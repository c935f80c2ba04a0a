"""Small helpers of the training loop: section timers and the progress display."""

from __future__ import annotations

import logging
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm

log = logging.getLogger("ellm")


class Timer:
    """Wall time per named section: ``with timer("env"): ...``; ``fractions(total)``."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.start = time.perf_counter()

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] += time.perf_counter() - t0

    def elapsed(self) -> float:
        return max(time.perf_counter() - self.start, 1e-9)

    def fractions(self) -> dict[str, float]:
        """Each section's share of the wall time since the timer started."""
        elapsed = self.elapsed()
        return {name: total / elapsed for name, total in self.totals.items()}


class Progress:
    """A tqdm bar on a terminal; elsewhere (a redirected log) one line every ``every`` frames.
    Either shows one rate: frames per second."""

    def __init__(self, total: int, initial: int, enabled: bool, every: int,
                 stream=None) -> None:
        self.total, self.frame, self.every = total, initial, max(1, every)
        self.status = ""
        stream = stream if stream is not None else sys.stderr
        self.bar = None
        if enabled and stream.isatty():
            self.bar = tqdm(total=total, initial=initial, unit="frame", dynamic_ncols=True,
                            smoothing=0.05, file=stream)
        self.lines = enabled and self.bar is None
        self._mark = (initial, time.perf_counter())

    def update(self, frame: int) -> None:
        if self.bar is not None:
            self.bar.update(frame - self.frame)
        elif self.lines and frame // self.every > self.frame // self.every:
            then, t0 = self._mark
            rate = (frame - then) / max(time.perf_counter() - t0, 1e-9)
            self._mark = (frame, time.perf_counter())
            log.info("frame %d/%d (%.0f%%) | %.1f frames/s%s", frame, self.total,
                     100.0 * frame / max(self.total, 1), rate,
                     f" | {self.status}" if self.status else "")
        self.frame = frame

    def set_status(self, text: str) -> None:
        self.status = text
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
