"""Ctrl-C that is never lost: one raised in a ctypes callback (numba) is dropped, so SIGINT is
recorded and raised again at ``check``; during a file write it waits until it is written."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

_pending = False
_deferring = 0
_held = False
_unraisable = sys.unraisablehook


def _quiet_dropped_interrupt(unraisable: Any) -> None:
    """Python's hook for exceptions it cannot raise, silent for an interrupt check() raises."""
    if not (_pending and isinstance(unraisable.exc_value, KeyboardInterrupt)):
        _unraisable(unraisable)


def _handler(signum: int, frame: FrameType | None) -> None:
    global _pending, _held
    if _deferring:
        _held = True
        return
    _pending = True
    raise KeyboardInterrupt


def install() -> None:
    """Record SIGINT as well as raise it, unless SIGINT is ignored (a background job)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handler)
        sys.unraisablehook = _quiet_dropped_interrupt


def check() -> None:
    """Raise KeyboardInterrupt if SIGINT arrived since the last check (its first raise may be lost).
    """
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold back a Ctrl-C while the body runs and raise it after (main thread only)."""
    global _deferring, _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    if not _deferring and _held:
        _held = False
        raise KeyboardInterrupt


__all__ = ["check", "deferred", "install"]
