"""Typed config schemas: dataclasses whose fields say what a valid value is, in words and as a
test. :func:`parse` checks a config node against one and names the key of a bad value. The run,
agent and game schemas all use it; it imports nothing of ellm but the shared error type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ellm.errors import ConfigError

__all__ = ["boolean", "integer", "is_int", "is_num", "one_of", "parse", "probability", "valid"]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def valid(expected: str, ok: Callable[[Any], bool]) -> Any:
    """A schema field: what a valid value is, in words (``expected``) and as a test (``ok``)."""
    return field(metadata={"expected": expected, "ok": ok})


def integer(low: int) -> Any:
    return valid(f"an integer >= {low}", lambda v: is_int(v) and v >= low)


def boolean() -> Any:
    return valid("true or false", lambda v: isinstance(v, bool))


def probability() -> Any:
    return valid("a probability in [0, 1]", lambda v: is_num(v) and 0 <= v <= 1)


def one_of(*choices: Any) -> Any:
    return valid(f"one of {', '.join(map(str, choices))}", lambda v: v in choices)


def parse(schema: type, node: Any, prefix: str = "") -> Any:
    """An instance of the dataclass ``schema`` from a config node or a mapping, checking every
    field; the error names ``prefix + field``."""
    values = {}
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        value = node.get(f.name)
        try:
            good = f.metadata["ok"](value)
        except TypeError:
            good = False
        if not good:
            raise ConfigError(f"{key}={value!r} is invalid: expected {f.metadata['expected']}")
        values[f.name] = value
    return schema(**values)
