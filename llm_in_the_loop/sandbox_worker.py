"""The process that runs policy code written by a language model (started by
:class:`baselines.sandbox.Sandbox`; stdlib and numpy only, run with ``python -I``).

Protocol: one JSON object per line on stdin, one answer per line on stdout.
``{"op": "load", "code": ..., "entry": "controller"}`` defines the code's function ``entry``;
``{"op": "call", "arg": ...}`` calls it on the argument. Answers: ``{"ok": true, "value": ...,
"printed": ...}`` or ``{"error": "ZeroDivisionError: division by zero (line 3: ...)"}``.

What the code can reach: the builtins without ``open``, ``eval``, ``exec``, ``compile``,
``input``, ``breakpoint`` and the like; ``import`` of :data:`ALLOWED_MODULES` only (already
loaded before the code runs); ``np``, ``math`` and ``random`` as globals. Beneath that, an audit
hook refuses file, process, network, ``ctypes`` and new-module events, and resource limits cap
memory and forbid writing files. The parent enforces the time limit by killing this process.
"""

from __future__ import annotations

import builtins
import io
import json
import math
import os
import random
import resource
import sys
from typing import Any, Final

import numpy as np

# Importable by the code (each loaded here first, so importing it later loads nothing new).
ALLOWED_MODULES: Final = ("math", "random", "numpy", "itertools", "functools", "collections",
                          "statistics", "heapq", "bisect", "operator", "copy", "string", "re",
                          "json", "typing", "dataclasses", "enum", "fractions", "decimal")
_REMOVED_BUILTINS: Final = ("open", "eval", "exec", "compile", "input", "breakpoint", "help",
                            "exit", "quit", "globals", "vars", "memoryview", "__loader__",
                            "__spec__", "copyright", "credits", "license")
# Audit events refused once the code may run (by prefix; "import" = loading a new module).
_REFUSED: Final = ("open", "import", "os.", "shutil.", "subprocess.", "_posixsubprocess",
                   "socket.", "ctypes.", "urllib.", "http.", "ftplib.", "smtplib.", "poplib.",
                   "imaplib.", "nntplib.", "telnetlib.", "webbrowser.", "pty.", "fcntl.",
                   "mmap.", "resource.", "signal.", "sys.addaudithook", "sys.remote_exec",
                   "gc.get_referrers", "gc.get_referents", "gc.get_objects", "glob.",
                   "tempfile.", "sqlite3.", "marshal.load", "pickle.find_class", "code.__new__",
                   "function.__new__", "cpython.run_", "builtins.input", "sys._getframe",
                   "sys._current_frames")
SOURCE: Final = "<policy>"
MAX_PRINTED: Final = 2000


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


def _describe(err: BaseException, code: str) -> str:
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


class Worker:
    def __init__(self) -> None:
        self.code = ""
        self.function: Any = None

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") == "load":
            return self.load(str(request["code"]), str(request["entry"]))
        if request.get("op") == "call":
            return self.call(request.get("arg"))
        return {"error": f"unknown request {request.get('op')!r}"}

    def load(self, code: str, entry: str) -> dict[str, Any]:
        self.code, self.function = code, None
        namespace = _namespace()
        try:
            exec(compile(code, SOURCE, "exec"), namespace)  # noqa: S102 - what the sandbox is for
        except (Exception, SystemExit) as err:  # noqa: BLE001 - the code's error is its answer
            return {"error": _describe(err, code)}
        function = namespace.get(entry)
        if not callable(function):
            return {"error": f"the code defines no function {entry}()"}
        self.function = function
        return {"ok": True}

    def call(self, arg: Any) -> dict[str, Any]:
        if self.function is None:
            return {"error": "no code loaded"}
        printed = io.StringIO()
        sys.stdout = printed
        try:
            value = self.function(arg)
            answer = {"ok": True, "value": json.loads(json.dumps(value, default=_plain))}
        except (Exception, SystemExit) as err:  # noqa: BLE001 - the code's error is its answer
            answer = {"error": _describe(err, self.code)}
        finally:
            sys.stdout = sys.__stdout__
        answer["printed"] = printed.getvalue()[:MAX_PRINTED]
        return answer


def main() -> None:
    memory = int(sys.argv[1]) * 2**20 if len(sys.argv) > 1 else 1024 * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    for name in ALLOWED_MODULES:
        __import__(name)
    requests = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    sys.stdout = sys.__stdout__ = io.StringIO()  # the code's prints never reach the protocol
    sys.stdin = sys.__stdin__ = io.StringIO()
    worker = Worker()
    sys.addaudithook(_audit)
    for line in requests:
        try:
            answer = worker.handle(json.loads(line))
        except (ValueError, KeyError) as err:
            answer = {"error": f"bad request: {err}"}
        except MemoryError:
            answer = {"error": "MemoryError: the code used more memory than allowed"}
        try:
            data = json.dumps(answer)
        except (TypeError, ValueError) as err:
            data = json.dumps({"error": f"the function's result cannot be sent back: {err}"})
        answers.write(data.encode() + b"\n")


if __name__ == "__main__":
    main()
