"""The process that runs policy code written by a language model (stdlib and numpy only, run
with ``python -I -S``); why its root, supervisors and children are split as they are, and how
an answer is framed, is in docs/optimizers.md, "The sandbox".

Protocol with the run: requests ``<op letter><length>\\n<JSON>``, ``{"op": "load", "code",
"entry"}`` and ``{"op": "call", "arg"}``; answers ``<length>\\n<JSON>``, ``{"value", "error",
"printed"}``; the first message is ``{"ready": true}``.
"""

from __future__ import annotations

import gc
import importlib
import io
import json
import os
import resource
import select
import signal
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any, Final, NoReturn

import numpy as np

from .guards import ALLOWED_MODULES, SOURCE, as_data, audit, define, describe
from .seccomp import Filter, architecture

MAX_PRINTED: Final = 2000  # characters of printed text (and of an error) sent back
MAX_ANSWER: Final = 1 << 20  # bytes of one answer
MAX_FILES: Final = 256  # open files per process
MAGIC: Final = b"\x00ELLM-END"  # ends the child's answer frame: payload, u32 length, MAGIC
_TRAILER: Final = struct.Struct("<I")
_PR_SET_PDEATHSIG: Final = 1
_NEXT_CANDIDATE: Final = 3  # a supervisor's exit code: a load of new code is waiting
# numpy's modules loaded on first use, loaded here: the code may not load modules
NUMPY_PARTS: Final = ("numpy.random", "numpy.linalg", "numpy.fft", "numpy.polynomial")
Prctl = Callable[..., int]
# Run by each child before its request: the pages a call writes are then copied already.
_WARM_UP: Final = compile("def f(obs):\n    return [obs, 1.5]\n", SOURCE, "exec")


@dataclass(frozen=True)
class Loaded:
    code: str
    entry: str
    compiled: CodeType | None = None  # compiled once the code has loaded in a child


def _error(text: str) -> dict[str, Any]:
    return {"value": None, "error": text, "printed": ""}


def _libc_prctl() -> Prctl | None:
    if sys.platform != "linux":
        return None
    import ctypes
    return ctypes.CDLL(None, use_errno=True).prctl


def _answer(request: dict[str, Any], loaded: Loaded | None) -> dict[str, Any]:
    """The child's untrusted step: define the code and call it on the request's argument."""
    if request["op"] == "probe":
        return _probe()
    if request["op"] == "load":
        loaded = Loaded(str(request["code"]), str(request["entry"]))
    assert loaded is not None  # the supervisor answers a call without code itself
    printed = io.StringIO()
    sys.stdout = sys.__stdout__ = printed
    sys.stderr = sys.__stderr__ = io.StringIO()
    sys.addaudithook(audit)
    try:
        function = define(loaded.compiled or loaded.code, loaded.entry)
        value = as_data(function(request["arg"])) if request["op"] == "call" else None
        return {"value": value, "printed": printed.getvalue()[:MAX_PRINTED]}
    except BaseException as err:  # noqa: BLE001 - the code's error is its answer
        return {"error": describe(err, loaded.code)}


def _probe() -> dict[str, Any]:
    """Whether the filter refuses a socket and a process (``bwrap.usable``)."""
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


def _serve(loaded: Loaded | None, sandbox: Filter | None, prctl: Prctl | None) -> bytes | None:
    """Restrict this process, wait for its request on fd 0, answer it; None if none came."""
    os.closerange(3, MAX_FILES)
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if sandbox is not None:
        sandbox.install()  # an OSError here stops the child before it reads any request
    np.random.seed(int.from_bytes(os.urandom(4), "little"))  # random reseeds itself at a fork
    json.dumps(as_data(define(_WARM_UP, "f")(json.loads('{"x": [0.5]}'))))
    with os.fdopen(0, "rb") as requests:
        body = requests.read()
    if not body:
        return None  # the supervisor ended or discarded this child
    payload = json.dumps(_answer(json.loads(body), loaded)).encode()
    if len(payload) > MAX_ANSWER:
        return json.dumps({"error": f"the code returned more than {MAX_ANSWER} bytes of "
                                    "data"}).encode()
    return payload


def _child(loaded: Loaded | None, sandbox: Filter | None, prctl: Prctl | None) -> NoReturn:
    """A forked child's life: serve, write the answer's frame, exit, whatever happens."""
    try:
        try:
            payload = _serve(loaded, sandbox, prctl)
        except Exception as err:  # noqa: BLE001 - an answer all the same
            payload = json.dumps({"error": f"the sandbox could not run the code: "
                                           f"{type(err).__name__}: {err}"}).encode()
        if payload is not None:
            frame = payload + _TRAILER.pack(len(payload)) + MAGIC
            for start in range(0, len(frame), 1 << 16):
                os.write(1, frame[start:start + (1 << 16)])
    finally:
        os._exit(0)


def _frame(tail: bytes) -> dict[str, Any] | None:
    """The child's answer if ``tail`` ends with a whole frame, else None."""
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
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("error"), (str, type(None))) \
            or not isinstance(answer.get("printed", ""), str):
        return _error("the code's answer was unreadable (nested too deeply?)")
    error = answer.get("error")
    return {"value": None if error is not None else answer.get("value"),
            "error": None if error is None else error[:MAX_PRINTED],
            "printed": answer.get("printed", "")[:MAX_PRINTED]}


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        return f"the code's process was killed by {name}"
    code = os.waitstatus_to_exitcode(status)
    return f"the code's process ended without an answer (exit code {code})"


@dataclass(frozen=True)
class Spare:
    pid: int
    requests: int  # the write end of its request pipe
    answers: int  # the read end of its answer pipe
    loaded: Loaded | None  # the code it holds for a call


class Supervisor:
    """Holds the loaded code; answers each request from a fresh child under the time limit."""

    def __init__(self, timeout: float, sandbox: Filter | None) -> None:
        self.timeout = timeout
        self.sandbox = sandbox
        self.prctl = _libc_prctl()
        self.loaded: Loaded | None = None
        self.spare: Spare | None = None  # the next child, forked ahead
        self.dying: list[int] = []  # killed children, reaped once their answer is sent

    def handle(self, body: bytes) -> dict[str, Any]:
        request = json.loads(body)
        op = request.get("op") if isinstance(request, dict) else None
        if op == "call" and self.loaded is None:
            return _error("no code loaded")
        if op not in ("load", "call", "probe"):
            return _error(f"unknown request {op!r}")
        answer = self.run(body, call=op == "call")
        if op == "load":  # a call after a failed load has no code
            code, entry = str(request["code"]), str(request["entry"])
            self.loaded = (None if answer["error"] is not None  # it compiled in the child
                           else Loaded(code, entry, compile(code, SOURCE, "exec")))
        return answer

    def prepare(self) -> None:
        """Fork the next child, holding the loaded code, before its request comes."""
        if self.spare is not None and self.spare.loaded is not self.loaded:
            self._discard()
        if self.spare is None:
            self.spare = self._fork()

    def _fork(self) -> Spare:
        child_requests, requests = os.pipe()
        answers, child_answers = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.dup2(child_requests, 0)
            os.dup2(child_answers, 1)
            os.dup2(child_answers, 2)
            _child(self.loaded, self.sandbox, self.prctl)
        os.close(child_requests)
        os.close(child_answers)
        return Spare(pid, requests, answers, self.loaded)

    def run(self, body: bytes, call: bool = False) -> dict[str, Any]:
        """The answer to ``body`` from the spare child, killed before the answer is returned."""
        if call and self.spare is not None and self.spare.loaded is not self.loaded:
            self._discard()
        child, self.spare = self.spare or self._fork(), None
        deadline = time.monotonic() + self.timeout
        try:
            with os.fdopen(child.requests, "wb") as requests:
                requests.write(body)
        except BrokenPipeError:
            pass  # it died before reading: its exit status says how
        try:
            answer, closed = self._collect(child.answers, deadline)
        finally:
            os.close(child.answers)
        if closed:
            _, status = os.waitpid(child.pid, 0)
            return answer or _error(_ended(status))
        os.kill(child.pid, signal.SIGKILL)  # its answer is in, or its time is up
        self.dying.append(child.pid)
        return answer or _error(f"TimeoutError: the code took longer than {self.timeout:g} s "
                                "(the time limit) and was stopped")

    def reap(self) -> None:
        self.dying = [pid for pid in self.dying if os.waitpid(pid, os.WNOHANG) == (0, 0)]

    def close(self) -> None:
        if self.spare is not None:
            os.kill(self.spare.pid, signal.SIGKILL)
            self._discard()
        for pid in self.dying:
            os.waitpid(pid, 0)
        self.dying = []

    def _discard(self) -> None:
        assert self.spare is not None
        os.close(self.spare.requests)  # it reads nothing and exits
        os.close(self.spare.answers)
        self.dying.append(self.spare.pid)
        self.spare = None

    @staticmethod
    def _collect(fd: int, deadline: float) -> tuple[dict[str, Any] | None, bool]:
        """The child's answer (None by ``deadline``), and whether the child closed the pipe."""
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


def _read(fd: int, size: int) -> bytes:
    """``size`` bytes, unbuffered so that the next candidate's supervisor reads what follows."""
    data = b""
    while len(data) < size and (chunk := os.read(fd, size - len(data))):
        data += chunk
    return data


def read_body(fd: int) -> bytes | None:
    """The JSON of a request's ``<length>\\n<JSON>`` (its letter read); None at the end."""
    header = b""
    while not header.endswith(b"\n") and len(header) < 32 and (byte := os.read(fd, 1)):
        header += byte
    return _read(fd, int(header)) if header.endswith(b"\n") else None


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def message(data: Any) -> bytes:
    body = json.dumps(data).encode()
    return b"%d\n" % len(body) + body


def request(data: dict[str, Any]) -> bytes:
    """A request as the worker reads it: its op's letter, then the message."""
    return str(data["op"])[:1].upper().encode() + message(data)


def _limit(memory_mb: int) -> None:
    memory = memory_mb * 2**20
    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, 0),
                         (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, MAX_FILES)):
        resource.setrlimit(limit, (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writing a file fails instead of killing


def _extensions() -> list[str]:
    """The files of the extension modules loaded now (the sandbox mounts their libraries)."""
    files = (getattr(m, "__file__", None) for m in list(sys.modules.values()))
    return sorted({f for f in files if isinstance(f, str) and f.endswith(".so")})


def main(args: list[str]) -> None:
    """``args``: memory limit (MB), time limit (s), mode: sandbox | none | check | extensions."""
    memory_mb, timeout, mode = int(args[0]), float(args[1]), args[2]
    if mode == "extensions":
        for name in (*ALLOWED_MODULES, *NUMPY_PARTS, "ctypes", "socket"):
            importlib.import_module(name)
        print(json.dumps(_extensions()))
        return
    _limit(memory_mb)
    prctl = _libc_prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    for name in (*ALLOWED_MODULES, *NUMPY_PARTS):
        importlib.import_module(name)
    sandbox = None
    if mode != "none":  # "sandbox" or "check": never run code without the filter
        arch = architecture()
        if arch is None:
            raise SystemExit("no seccomp filter for this machine")
        sandbox = Filter(arch)
    if mode == "check":
        importlib.import_module("socket")  # the probe's child may open no file to import it
        _write(1, message(Supervisor(timeout, sandbox).run(b'{"op": "probe"}')))
        return
    gc.freeze()  # the children's collections skip what exists now: fewer pages copied per fork
    load_waiting = False
    while True:  # the root: one supervisor per candidate (docs/optimizers.md)
        pid = os.fork()
        if pid == 0:
            _candidate(Supervisor(timeout, sandbox), load_waiting)
        status = os.waitpid(pid, 0)[1]
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != _NEXT_CANDIDATE:
            return  # the run is gone, or the supervisor failed: the run starts a new worker
        load_waiting = True


def _candidate(supervisor: Supervisor, load_waiting: bool) -> NoReturn:
    """A supervisor's life: answer requests until the run's stream ends or a new load comes."""
    code = 1
    try:
        if supervisor.prctl is not None:
            supervisor.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        supervisor.prepare()
        if not load_waiting:  # the worker's first supervisor
            _write(1, message({"ready": True}))
        code = _answer_requests(supervisor, load_waiting)
        supervisor.close()
    finally:
        os._exit(code)


def _answer_requests(supervisor: Supervisor, load_waiting: bool) -> int:
    held = False  # whether this process has read a candidate's code
    while True:
        letter = b"L" if load_waiting else _read(0, 1)
        load_waiting = False
        if letter == b"L" and held:
            return _NEXT_CANDIDATE
        held = held or letter == b"L"
        body = read_body(0) if letter else None
        if body is None:
            return 0
        try:
            data = message(supervisor.handle(body))
        except (ValueError, KeyError, RecursionError) as err:  # a bad request or answer
            data = message(_error(f"the request or its answer was unreadable: {err}"))
        _write(1, data)
        supervisor.reap()
        supervisor.prepare()
