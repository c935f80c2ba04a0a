"""The process that runs policy code written by a language model (started by
:class:`baselines.sandbox.Sandbox`, inside the namespaces of :mod:`baselines.sandbox_bwrap`
unless ``sandbox=none``; stdlib and numpy only, run with ``python -I -S``).

This process, the supervisor, never runs the code itself. For each request it forks a child
that drops everything the code must not touch and runs it:

- the child keeps only a fresh pipe to the supervisor (as its fd 1 and 2): the supervisor's
  pipes to the run are closed before the code starts, so nothing it does reaches the run;
- in the sandbox, a seccomp filter (:mod:`baselines.sandbox_seccomp`) then refuses new threads
  and processes, sockets and signals, so the call ends when the child ends: the supervisor kills
  it at the time limit; and each call starts from the loaded state, never from the last call's;
- the child writes its answer last, as ``payload + length + MAGIC``, and exits. The supervisor
  reads the pipe until the child is gone and takes only that final frame, so bytes the code
  wrote itself are never mistaken for an answer, and a frame the code wrote and exited on can
  only be its own call's answer: no answer can land on another call.

Protocol with the run (both ways): ``<length>\\n<JSON>``. Requests ``{"op": "load", "code",
"entry"}`` and ``{"op": "call", "arg"}``; answers ``{"value", "error", "printed"}``; the first
message is ``{"ready": true}``. The builtins lack ``open``, ``eval``, ``exec`` and the like,
``import`` reaches :data:`ALLOWED_MODULES` only and an audit hook refuses files and processes:
these give clear errors for a model's slips; the boundary is the OS beneath them.
"""

from __future__ import annotations

import builtins
import gc
import io
import json
import math
import os
import random
import resource
import select
import signal
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any, BinaryIO, Final

import numpy as np

from .sandbox_seccomp import Filter, architecture

ALLOWED_MODULES: Final = ("math", "random", "numpy", "itertools", "functools", "collections",
                          "statistics", "heapq", "bisect", "operator", "copy", "string", "re",
                          "json", "typing", "dataclasses", "enum", "fractions", "decimal")
_REMOVED_BUILTINS: Final = ("open", "eval", "exec", "compile", "input", "breakpoint", "help",
                            "exit", "quit", "globals", "vars", "memoryview", "__loader__",
                            "__spec__", "copyright", "credits", "license")
_REFUSED: Final = ("open", "import", "os.", "shutil.", "subprocess.", "_posixsubprocess",
                   "socket.", "ctypes.", "urllib.", "http.", "pty.", "fcntl.", "mmap.",
                   "resource.", "signal.", "sys.addaudithook", "gc.get_referrers",
                   "gc.get_referents", "gc.get_objects", "glob.", "tempfile.", "sqlite3.",
                   "marshal.load", "pickle.find_class", "code.__new__", "function.__new__",
                   "cpython.run_", "builtins.input", "sys._getframe", "sys._current_frames")
SOURCE: Final = "<policy>"
MAX_PRINTED: Final = 2000  # characters of printed text (and of an error) sent back
MAX_ANSWER: Final = 1 << 20  # bytes of one answer
MAGIC: Final = b"\x00ELLM-END"  # ends the child's answer frame: payload, u32 length, MAGIC
_TRAILER: Final = struct.Struct("<I")
_PR_SET_PDEATHSIG: Final = 1


def _audit(event: str, args: tuple) -> None:
    if event.startswith(_REFUSED):
        raise PermissionError(f"{event} is not allowed in policy code")


def _safe_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                 level: int = 0) -> Any:
    if level or name.split(".")[0] not in ALLOWED_MODULES or name not in sys.modules:
        raise ImportError(f"policy code may import only {', '.join(ALLOWED_MODULES)} "
                          f"(not {name!r})")
    return builtins.__import__(name, globals, locals, fromlist, level)


def _namespace() -> dict[str, Any]:
    safe = {k: v for k, v in vars(builtins).items() if k not in _REMOVED_BUILTINS}
    safe["__import__"] = _safe_import
    return {"__builtins__": safe, "__name__": "policy", "np": np, "numpy": np, "math": math,
            "random": random}


def _where(err: BaseException, code: str) -> str:
    """`` (line N: <source line>)`` of the deepest frame in the policy code, or ""."""
    lines = code.splitlines()
    lineno = err.lineno if isinstance(err, SyntaxError) and err.filename == SOURCE else None
    tb = err.__traceback__
    while tb is not None:  # no source file is read: the code's own lines are at hand
        if tb.tb_frame.f_code.co_filename == SOURCE:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    if lineno is None or not 0 < lineno <= len(lines):
        return ""
    return f" (line {lineno}: {lines[lineno - 1].strip()})"


def describe(err: BaseException, code: str) -> str:
    detail = err.msg if isinstance(err, SyntaxError) else str(err)
    if isinstance(err, MemoryError):
        detail = "the code used more memory than allowed"
    return f"{type(err).__name__}{': ' * bool(detail)}{detail}{_where(err, code)}"


def _plain(value: Any) -> Any:
    """numpy values as plain JSON data; anything else that JSON refuses raises TypeError."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"the function returned a {type(value).__name__}, which is not plain data")


def _libc_prctl() -> Callable[..., int] | None:
    if sys.platform != "linux":
        return None
    import ctypes
    return ctypes.CDLL(None, use_errno=True).prctl


# ---- the child ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Loaded:
    code: str
    entry: str
    compiled: CodeType | None = None  # compiled once the code has loaded in a child


class _NoEntry(Exception):
    pass


def _define(code: str | CodeType, entry: str) -> Callable[[Any], Any]:
    namespace = _namespace()
    if isinstance(code, str):
        code = compile(code, SOURCE, "exec")
    exec(code, namespace)  # noqa: S102 - what the sandbox is for
    function = namespace.get(entry)
    if not callable(function):
        raise _NoEntry(f"the code defines no function {entry}()")
    return function


def _answer(loaded: Loaded, call: tuple[Any] | None, printed: io.StringIO) -> dict[str, Any]:
    """Define the code and, for a ``call`` (its argument), call it: the child's untrusted step.
    The code runs from its top in every child, so no call sees what an earlier one did."""
    sys.addaudithook(_audit)
    try:
        function = _define(loaded.compiled or loaded.code, loaded.entry)
        if call is None:
            return {"printed": printed.getvalue()[:MAX_PRINTED]}
        value = json.loads(json.dumps(function(*call), default=_plain))
        return {"value": value, "printed": printed.getvalue()[:MAX_PRINTED]}
    except _NoEntry as err:
        return {"error": str(err)}
    except BaseException as err:  # noqa: BLE001 - the code's error is its answer
        return {"error": describe(err, loaded.code)}


def _probe(printed: io.StringIO) -> dict[str, Any]:
    """Whether the filter refuses a socket and a process (``sandbox_bwrap.problem``)."""
    import socket
    try:
        socket.socket().close()
        return {"error": "the seccomp filter let the code open a socket"}
    except PermissionError:
        pass
    try:
        if os.fork() == 0:
            os._exit(0)
        return {"error": "the seccomp filter let the code start a process"}
    except PermissionError:
        return {"value": "refused"}


Job = Callable[[io.StringIO], dict[str, Any]]  # what a child runs, given its print buffer


def _child(job: Job, pipe: int, sandbox: Filter | None,
           prctl: Callable[..., int] | None) -> None:
    """In the forked child: cut the way back to the run, restrict, run, answer, exit."""
    try:
        os.dup2(pipe, 1)
        os.dup2(pipe, 2)
        os.close(0)
        os.closerange(3, 1 << 16)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if sandbox is not None:
            sandbox.install()  # an OSError here stops the child before any code runs
        printed = io.StringIO()
        sys.stdout = sys.__stdout__ = printed
        sys.stderr = sys.__stderr__ = io.StringIO()
        payload = json.dumps(job(printed)).encode()
        if len(payload) > MAX_ANSWER:
            payload = json.dumps({"error": f"the code returned more than {MAX_ANSWER} bytes "
                                           "of data"}).encode()
    except BaseException as err:  # noqa: BLE001 - whatever happened, answer and exit
        payload = json.dumps({"error": f"the sandbox could not run the code: {err}"}).encode()
    frame = payload + _TRAILER.pack(len(payload)) + MAGIC
    try:
        for start in range(0, len(frame), 1 << 16):
            os.write(1, frame[start:start + (1 << 16)])
    finally:
        os._exit(0)


# ---- the supervisor -------------------------------------------------------------------------
def _error(text: str) -> dict[str, Any]:
    return {"value": None, "error": text, "printed": ""}


def _frame(tail: bytes) -> dict[str, Any] | None:
    """The child's answer if ``tail`` ends with a whole frame (module docstring), else None."""
    if len(tail) < _TRAILER.size + len(MAGIC) or not tail.endswith(MAGIC):
        return None
    body = tail[:-len(MAGIC)]
    (size,) = _TRAILER.unpack(body[-_TRAILER.size:])
    payload = body[-_TRAILER.size - size:-_TRAILER.size]
    if len(payload) != size:
        return None
    try:
        answer = json.loads(payload)
    except (ValueError, RecursionError, MemoryError):
        return _error("the code's answer was unreadable (nested too deeply?)")
    if not isinstance(answer, dict):
        return _error("the code's answer was unreadable")
    error, printed = answer.get("error"), answer.get("printed", "")
    if not isinstance(error, (str, type(None))) or not isinstance(printed, str):
        return _error("the code's answer was unreadable")
    return {"value": None if error is not None else answer.get("value"),
            "error": None if error is None else error[:MAX_PRINTED],
            "printed": printed[:MAX_PRINTED]}


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        return f"the code's process was killed by {name}"
    code = os.waitstatus_to_exitcode(status)
    return f"the code's process ended without an answer (exit code {code})"


class Supervisor:
    """Holds the loaded code; runs each request in a fresh child under the time limit."""

    def __init__(self, timeout: float, sandbox: Filter | None) -> None:
        self.timeout = timeout
        self.sandbox = sandbox
        self.prctl = _libc_prctl()
        self.loaded: Loaded | None = None
        self.dying: int | None = None  # a killed child, reaped after its answer is sent

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") == "load":
            loaded, self.loaded = Loaded(str(request["code"]), str(request["entry"])), None
            answer = self.run(lambda printed: _answer(loaded, None, printed))
            if answer["error"] is None:  # it compiled in the child: no crash here
                self.loaded = Loaded(loaded.code, loaded.entry,
                                     compile(loaded.code, SOURCE, "exec"))
            return answer
        if request.get("op") == "call":
            if (loaded := self.loaded) is None:
                return _error("no code loaded")
            arg = request.get("arg")
            return self.run(lambda printed: _answer(loaded, (arg,), printed))
        return _error(f"unknown request {request.get('op')!r}")

    def run(self, job: Job) -> dict[str, Any]:
        """``job``'s answer from a fresh child; the child is killed before the answer is
        returned (``reap`` collects it)."""
        self.reap()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _child(job, write, self.sandbox, self.prctl)
        os.close(write)
        try:
            answer, closed = self._collect(read, time.monotonic() + self.timeout)
        finally:
            os.close(read)
        if closed:
            _, status = os.waitpid(pid, 0)
            return answer or _error(_ended(status))
        os.kill(pid, signal.SIGKILL)  # its answer is in, or its time is up
        self.dying = pid
        return answer or _error(f"TimeoutError: the code took longer than {self.timeout:g} s "
                                "(the time limit) and was stopped")

    def reap(self) -> None:
        if self.dying is not None:
            os.waitpid(self.dying, 0)
            self.dying = None

    @staticmethod
    def _collect(fd: int, deadline: float) -> tuple[dict[str, Any] | None, bool]:
        """The child's answer (None if none came by ``deadline``), and whether the child closed
        the pipe. Only the end of what it wrote is kept: enough for one whole frame."""
        keep = MAX_ANSWER + _TRAILER.size + len(MAGIC)
        tail = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None, False
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return _frame(tail), True
            tail = (tail + chunk)[-keep:]
            if (answer := _frame(tail)) is not None:
                return answer, False


def read_message(stream: BinaryIO) -> Any:
    """One ``<length>\\n<JSON>`` message; None at the end of the stream."""
    header = stream.readline(32)
    if not header:
        return None
    return json.loads(stream.read(int(header)))


def message(data: Any) -> bytes:
    body = json.dumps(data).encode()
    return b"%d\n" % len(body) + body


def main(args: list[str]) -> None:
    """``args``: memory limit (MB), time limit (s), mode: sandbox | none | check (the filter
    refuses a socket and a process: one answer, then exit)."""
    memory_mb, timeout, mode = int(args[0]), float(args[1]), args[2]
    memory = memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writing a file fails instead of killing
    prctl = _libc_prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    for name in ALLOWED_MODULES:
        __import__(name)
    sandbox = None
    if mode != "none":  # "sandbox" or "check": never run code without the filter
        arch = architecture()
        if arch is None:
            raise SystemExit("no seccomp filter for this machine")
        sandbox = Filter(arch)
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    if mode == "check":
        answers.write(message(Supervisor(timeout, sandbox).run(_probe)))
        return
    supervisor = Supervisor(timeout, sandbox)
    gc.freeze()  # the children's collections skip what exists now: fewer pages copied per fork
    answers.write(message({"ready": True}))
    while (request := read_message(requests)) is not None:
        answers.write(message(supervisor.handle(request)))
        supervisor.reap()

