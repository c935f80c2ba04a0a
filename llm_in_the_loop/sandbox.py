"""Run policy code written by a language model in a separate, restricted process with a time
limit (the worker: :mod:`baselines.sandbox_worker`).

The worker starts with ``python -I`` (no user site, no ``PYTHON*`` variables), an empty
environment (no API key reaches it), an empty temporary working directory and stderr discarded.
In it, the code sees restricted builtins, may import only a few stdlib modules and numpy, and an
audit hook refuses opening files, starting processes, sockets and ``ctypes``; memory is capped
and files cannot be written (docs/optimizers.md, "The sandbox"). This keeps a model's slips
(an endless loop, a stray ``open``) from harming the run or the machine; it is not a security
boundary against code written to escape: run untrusted models inside a container.

Every failure comes back as text for the optimiser (``"ZeroDivisionError: division by zero
(line 3: return 1 / 0)"``, ``"took longer than 2 s ..."``), never as an exception: the run goes
on. A worker that timed out or died is killed and replaced at the next call.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

WORKER: Final = Path(__file__).with_name("sandbox_worker.py")
START_TIMEOUT: Final = 60.0  # seconds for a fresh worker to import numpy and load the code
MAX_ANSWER: Final = 1 << 20  # bytes of one answer line


@dataclass(frozen=True)
class Outcome:
    """The function's return value (plain JSON data), or the error in words; ``printed``: what
    the code printed (truncated)."""

    value: Any = None
    error: str | None = None
    printed: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


class Sandbox:
    """A restricted worker process running one piece of code (module docstring).

    ``timeout``: seconds one call (or one load) of the code may take; ``memory_mb``: the
    worker's address-space limit. Use ``load(code, entry)`` then ``call(arg)``; ``close()``
    ends the worker."""

    def __init__(self, timeout: float = 2.0, memory_mb: int = 1024) -> None:
        if timeout <= 0 or memory_mb < 256:
            raise ValueError(f"sandbox timeout must be > 0 and memory >= 256 MB, got "
                             f"{timeout} s, {memory_mb} MB")
        self.timeout = timeout
        self.memory_mb = memory_mb
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None
        self._loaded: tuple[str, str] | None = None  # (code, entry) the worker holds
        self.restarts = 0

    # ---- public -----------------------------------------------------------------------------
    def load(self, code: str, entry: str) -> Outcome:
        """Define ``entry`` from ``code`` (also re-done after a worker is replaced)."""
        self._loaded = (code, entry)
        return self._send({"op": "load", "code": code, "entry": entry}, self._load_timeout())

    def call(self, arg: Any) -> Outcome:
        """``entry(arg)`` in the worker; ``arg`` must be plain JSON data."""
        if self._loaded is None:
            return Outcome(error="no code loaded")
        if self._proc is None:
            loaded = self.load(*self._loaded)
            if not loaded.ok:
                return loaded
        return self._send({"op": "call", "arg": arg}, self.timeout)

    def close(self) -> None:
        self._stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Sandbox:  # noqa: PYI034 - Self needs Python 3.11
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---- the worker -------------------------------------------------------------------------
    def _load_timeout(self) -> float:
        return self.timeout + (START_TIMEOUT if self._proc is None else 0.0)

    def _start(self) -> subprocess.Popen[bytes]:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="ellm-sandbox-")
        threads = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                    "MKL_NUM_THREADS")}
        self._proc = subprocess.Popen(
            [sys.executable, "-I", str(WORKER), str(self.memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self._dir, env={"PATH": os.defpath, **threads}, start_new_session=True)
        return self._proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    def _send(self, request: dict[str, Any], timeout: float) -> Outcome:
        proc = self._proc or self._start()
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._lost("stopped before it could run")
        except (TypeError, ValueError) as err:
            return Outcome(error=f"the input cannot be sent to the code: {err}")
        line, status = self._read_line(proc, timeout)
        if status == "timeout":
            self.restarts += 1
            self._stop()
            return Outcome(error=f"TimeoutError: the code took longer than {timeout:g} s "
                                 "(the time limit) and was stopped")
        if status == "too long":
            self._stop()
            return Outcome(error=f"the code returned more than {MAX_ANSWER} bytes of data")
        if line is None:
            return self._lost(f"ended (exit code {proc.wait()})")
        try:
            answer = json.loads(line)
        except ValueError:
            self._stop()
            return Outcome(error="the code's process sent back something unreadable")
        return Outcome(answer.get("value"), answer.get("error"), answer.get("printed", ""))

    def _lost(self, what: str) -> Outcome:
        self.restarts += 1
        self._stop()
        return Outcome(error=f"the code's process {what} (it ran out of memory or was "
                             "killed); it is restarted for the next call")

    @staticmethod
    def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes | None, str]:
        """One answer line and "ok", or None and why: "timeout", "ended", "too long"."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None, "timeout"
            chunk = os.read(fd, 65536)
            if not chunk:
                return None, "ended"
            chunks.append(chunk)
            size += len(chunk)
            if b"\n" in chunk:
                return b"".join(chunks).split(b"\n", 1)[0], "ok"
            if size > MAX_ANSWER:
                return None, "too long"
