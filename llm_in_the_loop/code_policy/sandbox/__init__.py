"""Run policy code written by a language model in a sandbox that holds against code written to
escape it, with a time limit (docs/optimizers.md, "The sandbox"); every failure comes back as
text for the optimiser, never as an exception, so the run goes on.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Final

from llm_in_the_loop.code_policy.sandbox import bwrap as sandbox_bwrap
from llm_in_the_loop.code_policy.sandbox.worker import MAX_ANSWER, request

log = logging.getLogger(__name__)
ISOLATIONS: Final = ("os", "none")
START_TIMEOUT: Final = 60.0  # seconds for a fresh worker to import numpy (it runs no code yet)
GRACE: Final = 1.0  # seconds past the time limit for the worker to report a time-out itself
MAX_MESSAGE: Final = 2 * MAX_ANSWER  # bytes of one message from the worker


class SandboxUnavailable(RuntimeError):
    """The OS sandbox cannot run on this machine (the message says why)."""


@dataclass(frozen=True)
class Outcome:
    """The function's return value (plain JSON data), or the error in words."""

    value: Any = None
    error: str | None = None
    printed: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


class Sandbox:
    """A worker process running one piece of code; ``isolation="none"`` keeps only the
    worker's Python-level guards and limits, no security boundary."""

    def __init__(self, timeout: float = 2.0, memory_mb: int = 1024,
                 isolation: str = "os") -> None:
        if timeout <= 0 or memory_mb < 256 or isolation not in ISOLATIONS:
            raise ValueError(f"sandbox timeout must be > 0, memory >= 256 MB and isolation one "
                             f"of {ISOLATIONS}; got {timeout} s, {memory_mb} MB, {isolation!r}")
        if os.name != "posix":
            raise SandboxUnavailable("policy code runs on Linux (or macOS with isolation "
                                     "'none') only: the worker forks a process per call")
        if isolation == "os" and (problem := sandbox_bwrap.problem()) is not None:
            raise SandboxUnavailable(problem)
        if isolation == "none":
            log.warning("sandbox=none: policy code runs WITHOUT OS isolation; code written to "
                        "escape can read and write your files, use the network, read your API "
                        "key and start processes. Use it only with models you trust.")
        else:
            log.info("sandbox: namespaces and a deny-by-default seccomp filter; memory: %d MB "
                     "of address space per call (RLIMIT_AS), no cgroup: the filter leaves the "
                     "code no memory outside its own process", memory_mb)
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.isolation = isolation
        self._proc: subprocess.Popen[bytes] | None = None
        self._loaded: tuple[str, str] | None = None  # (code, entry) the worker holds
        self.restarts = 0

    def load(self, code: str, entry: str) -> Outcome:
        """Define ``entry`` from ``code`` (also re-done after a worker is replaced)."""
        self._loaded = (code, entry)
        return self._send({"op": "load", "code": code, "entry": entry})

    def call(self, arg: Any) -> Outcome:
        """``entry(arg)`` in a fresh copy of the loaded code; ``arg`` must be plain JSON data."""
        if self._loaded is None:
            return Outcome(error="no code loaded")
        if self._proc is None:
            loaded = self.load(*self._loaded)
            if not loaded.ok:
                return loaded
        return self._send({"op": "call", "arg": arg})

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> Sandbox:  # noqa: PYI034 - Self needs Python 3.11
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _command(self) -> list[str]:
        args = [str(self.memory_mb), repr(float(self.timeout))]
        if self.isolation == "os":
            bwrap = sandbox_bwrap.usable()[0]
            assert bwrap is not None  # checked when the sandbox was made
            return sandbox_bwrap.command(bwrap, [*args, "sandbox"])
        return sandbox_bwrap.worker_command(sys.executable, [*args, "none"])

    def _start(self) -> str | None:
        """Start the worker and wait until it is ready; None, or why it could not start."""
        try:
            self._proc = subprocess.Popen(
                self._command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, cwd="/", env=dict(sandbox_bwrap.THREADS),
                start_new_session=True)
        except (OSError, ImportError, RuntimeError) as err:
            return f"the sandbox could not start: {err}"
        assert self._proc.stdin is not None
        os.set_blocking(self._proc.stdin.fileno(), False)  # writes never wait on the worker
        ready, status = self._receive(time.monotonic() + START_TIMEOUT)
        if status == "ok" and isinstance(ready, dict) and ready.get("ready") is True:
            return None
        self._stop()
        return f"the sandbox could not start ({status})"

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker's session: it and all it started
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    def _send(self, body: dict[str, Any]) -> Outcome:
        try:
            data = request(body)
        except (TypeError, ValueError, RecursionError) as err:
            return Outcome(error=f"the input cannot be sent to the code: {err}")
        if self._proc is None and (problem := self._start()) is not None:
            return Outcome(error=problem)
        deadline = time.monotonic() + self.timeout + GRACE
        status = self._write(data, deadline)
        answer = None
        if status == "ok":
            answer, status = self._receive(deadline)
        if status == "ok" and _well_formed(answer):
            return Outcome(answer.get("value"), answer.get("error"), answer.get("printed", ""))
        self.restarts += 1
        self._stop()
        if status == "timeout":
            return Outcome(error=f"TimeoutError: the code took longer than {self.timeout:g} s "
                                 "(the time limit) and was stopped")
        return Outcome(error=f"the code's worker process failed ({status}); it is restarted "
                             "for the next call")

    def _write(self, data: bytes, deadline: float) -> str:
        """Write ``data`` to the worker by ``deadline``: "ok", "timeout" or "ended"."""
        assert self._proc is not None and self._proc.stdin is not None
        fd = self._proc.stdin.fileno()
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                return "timeout"
            try:
                view = view[os.write(fd, view[:1 << 16]):]
            except BlockingIOError:
                continue
            except OSError:
                return "ended"
        return "ok"

    def _receive(self, deadline: float) -> tuple[Any, str]:
        """One ``<length>\\n<JSON>`` message by ``deadline``, and "ok"; or None and why:
        "timeout", "ended" or "garbled"."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        data, size = bytearray(), -1
        while True:
            if size < 0 and b"\n" in data:
                header, _, rest = bytes(data).partition(b"\n")
                if not header.isdigit() or int(header) > MAX_MESSAGE:
                    return None, "garbled"
                size, data = int(header), bytearray(rest)
            if size >= 0 and len(data) >= size:
                try:
                    return (json.loads(data), "ok") if len(data) == size else (None, "garbled")
                except (ValueError, RecursionError):
                    return None, "garbled"
            if size < 0 and len(data) > 32:
                return None, "garbled"
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None, "timeout"
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None, "ended"
            data += chunk


def _well_formed(answer: Any) -> bool:
    return (isinstance(answer, dict) and isinstance(answer.get("error"), (str, type(None)))
            and isinstance(answer.get("printed", ""), str))
