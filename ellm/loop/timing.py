"""Small helpers of the training loop: section timers and the progress display."""

from __future__ import annotations

import logging
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
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


def duration(seconds: float) -> str:
    """``45 s``, ``12.5 min``, ``3.2 h``: a wall time in the unit a person would say it in."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class EverySeconds:
    """True at most once every ``seconds`` of wall time (0: every call), so that progress lines
    come at a steady pace however long each step takes."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = float(seconds), clock
        self.start = self._last = clock()

    def __call__(self) -> bool:
        now = self.clock()
        if now - self._last < self.seconds:
            return False
        self._last = now
        return True

    def elapsed(self) -> float:
        return self.clock() - self.start


class Progress:
    """A tqdm bar on a terminal, else a line every ``every_s`` seconds, and one time estimate."""

    def __init__(self, total: int, initial: int, enabled: bool, every_s: float,
                 seed_frames: int = 0, stream=None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.total, self.frame, self.enabled = total, initial, enabled
        self.seed_frames = seed_frames
        self.status = ""
        stream = stream if stream is not None else sys.stderr
        self.bar = None
        if enabled and stream.isatty():
            self.bar = tqdm(total=total, initial=initial, unit="frame", dynamic_ncols=True,
                            smoothing=0.05, file=stream)
        self.lines = enabled and self.bar is None
        self._due = EverySeconds(every_s, clock)
        self._first = self._mark = (initial, self._due.start)
        self._estimated = False

    def update(self, frame: int) -> None:
        if self.bar is not None:
            self.bar.update(frame - self.frame)
        self.frame = frame
        if self.enabled and self._due():
            self._report(self._due.clock())

    def _report(self, now: float) -> None:
        first, t0 = self._first
        pace = (self.frame - first) / max(now - t0, 1e-9)
        left = max(self.total - self.frame, 0) / max(pace, 1e-9)
        if not self._estimated:
            self._estimated = True
            seeds = max(min(self.frame, self.seed_frames) - first, 0)
            log.info("time estimate: about %s for the remaining %d frames, a projection at "
                     "%.1f frames/s over the first %d frames (%s of wall time, evaluations "
                     "included%s)", duration(left), self.total - self.frame, pace,
                     self.frame - first, duration(now - t0),
                     f"; {seeds} of them seed frames, faster without updates" if seeds else "")
        if self.lines:
            then, t_then = self._mark
            rate = (self.frame - then) / max(now - t_then, 1e-9)
            log.info("frame %d/%d (%.0f%%) | %.1f frames/s | about %s left%s", self.frame,
                     self.total, 100.0 * self.frame / max(self.total, 1), rate, duration(left),
                     f" | {self.status}" if self.status else "")
        self._mark = (self.frame, now)

    def set_status(self, text: str) -> None:
        self.status = text
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
