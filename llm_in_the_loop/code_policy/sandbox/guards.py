"""What policy code sees in the sandbox's child process, and its errors in words (stdlib and
numpy only): guards that give a model's slips a clear error, no boundary (code can switch them
off); the namespaces and the seccomp filter around the child are.
"""

from __future__ import annotations

import builtins
import json
import math
import random
import sys
from collections.abc import Callable
from types import CodeType
from typing import Any, Final

import numpy as np

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


class NoEntry(Exception):
    """The code defines no function of the entry's name."""


def audit(event: str, args: tuple) -> None:
    if event.startswith(_REFUSED):
        raise PermissionError(f"{event} is not allowed in policy code")


def _safe_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                 level: int = 0) -> Any:
    if level or name.split(".")[0] not in ALLOWED_MODULES or name not in sys.modules:
        raise ImportError(f"policy code may import only {', '.join(ALLOWED_MODULES)} "
                          f"(not {name!r})")
    return builtins.__import__(name, globals, locals, fromlist, level)


def define(code: str | CodeType, entry: str) -> Callable[[Any], Any]:
    """``code``'s function ``entry``, run in a fresh restricted namespace."""
    safe = {k: v for k, v in vars(builtins).items() if k not in _REMOVED_BUILTINS}
    safe["__import__"] = _safe_import
    namespace = {"__builtins__": safe, "__name__": "policy", "np": np, "numpy": np,
                 "math": math, "random": random}
    exec(compile(code, SOURCE, "exec") if isinstance(code, str) else code,  # noqa: S102
         namespace)
    function = namespace.get(entry)
    if not callable(function):
        raise NoEntry(f"the code defines no function {entry}()")
    return function


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
    """``"KeyError: 'x' (line 3: return obs['x'])"``."""
    if isinstance(err, NoEntry):
        return str(err)
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


def as_data(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_plain))
