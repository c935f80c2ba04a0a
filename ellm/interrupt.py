"""Ctrl-C that is never lost.

Python raises :class:`KeyboardInterrupt` wherever the main thread is when SIGINT arrives. Inside
a ctypes callback the exception is printed ("Exception ignored on calling ctypes callback
function") and dropped, and the run goes on: numba compiling (or loading from its cache)
Crafter's world-generation noise at a process's first reset runs such callbacks (llvmlite), so
a Ctrl-C in a run's first seconds was lost. :func:`install` (called by ``train.py``) makes the
SIGINT handler record the interrupt as well as raise it, and the loops call :func:`check` at
each frame, chunk and evaluation episode: a dropped interrupt is raised again there, and its
"Exception ignored" traceback is not printed.

A Ctrl-C in the middle of writing a file is held back until the file is written
(:func:`deferred`, around every :func:`ellm.files.atomic_write`): raised inside ``torch.save``,
it became a ``RuntimeError`` from torch's zip writer, a traceback and exit code 1 instead of a
clean stop.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

_pending = False  # an interrupt was raised; check() raises it again
_deferring = 0  # depth of deferred() blocks in the main thread
_held = False  # an interrupt arrived inside one
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
    """Raise :class:`KeyboardInterrupt` if SIGINT arrived since :func:`install` or the last
    check (its first raise may have been dropped)."""
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold back a Ctrl-C that arrives while the body runs, and raise it once the body is done
    (in the main thread, where signal handlers run; elsewhere the body just runs)."""
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
