"""Targets for ``ellm_tools.serve.supervise`` in tests: real child processes that behave as a
model process does when it answers, fails its check, or crashes (imported by the spawned child,
so they live in a module of their own)."""

from __future__ import annotations

import os
import signal
import time
from multiprocessing.connection import Connection


def crash_before_ready(ready: Connection) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def crash_while_serving(ready: Connection) -> None:
    ready.send("ready: extra buffer types off")
    ready.close()
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGSEGV)


def fail_check(ready: Connection) -> None:
    ready.send("failed: ValueError: the model answered nothing")
    ready.close()
    raise SystemExit(1)


def serve_until_stopped(ready: Connection) -> None:
    ready.send("ready: extra buffer types off")
    ready.close()
    time.sleep(60)


def crash_answering(in_flight, ready: Connection) -> None:
    """Ready, then dies with SIGSEGV while a request is noted in flight (as the guard notes)."""
    from ellm_tools.serve_guard import InFlight

    ready.send("ready: extra buffer types off")
    ready.close()
    InFlight(in_flight).start(1, "POST /v1/completions (1,234 bytes)")
    os.kill(os.getpid(), signal.SIGSEGV)
