"""Child processes watched by their parent: they die with it, and a crash is reported by name."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (a no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def signal_name(number: int) -> str:
    """``SIGSEGV (Segmentation fault)`` for 11."""
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"signal {number}"
    return f"{sig.name} ({signal.strsignal(sig) or sig.name})"


def supervise(target: Callable[..., None], args: tuple[Any, ...], *, url: str,
              hint: str | Callable[[bool], str] = "",
              on_ready: Callable[[int, str], None] = lambda pid, status: None) -> int:
    """Run ``target(*args, ready)`` in a spawned child; 0 on SIGINT/SIGTERM, else 1."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=target, args=(*args, send), name="ellm-lm-model")
    child.start()
    send.close()
    stopping = False

    def stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        if child.pid is not None and child.is_alive():
            os.kill(child.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = _await_ready(child, receive)
        if status.startswith("ready"):
            on_ready(child.pid or 0, status)
        child.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return _verdict(child.exitcode, status, stopping, url, hint)


def _await_ready(child: BaseProcess, receive: Connection) -> str:
    """The child's ready line, or "" when it died (or closed the pipe) without one."""
    while child.is_alive() or receive.poll():
        try:
            if receive.poll(0.2):
                return str(receive.recv())
        except (EOFError, OSError):
            return ""
    return ""


def _verdict(exitcode: int | None, status: str, stopping: bool, url: str,
             hint: str | Callable[[bool], str]) -> int:
    ready = status.startswith("ready")
    hint = hint(ready) if callable(hint) else hint
    if stopping and (exitcode == 0 or exitcode in (-signal.SIGTERM, -signal.SIGINT)):
        return 0
    if status.startswith("failed"):
        print(f"error: the model failed its start-up check (one short completion) and "
              f"{url} was never served: {status.removeprefix('failed: ')}", file=sys.stderr)
    elif exitcode is not None and exitcode < 0:
        when = ("while serving: requests in flight got no answer (clients see the "
                "connection closed without an answer)" if ready else
                "while loading the model or computing its start-up check completion")
        print(f"error: the model process died with {signal_name(-exitcode)} {when}. {hint}",
              file=sys.stderr)
    else:
        print(f"error: the model process exited with code {exitcode} "
              f"{'while serving' if ready else 'before it was ready'}", file=sys.stderr)
    return 1
