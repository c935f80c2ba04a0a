"""Typed config schemas: dataclasses whose fields say what a valid value is, in words and as a
test. :func:`parse` checks a config node against one and names the key of a bad value. The run,
agent and game schemas all use it; it imports nothing of ellm but the shared error type.

A field may have a default (``valid(..., default=x)``): a key missing from the node takes it, so an
agent's options can be given in part (the original's ``+agent.<key>=`` spelling). A schema's
``__post_init__`` checks what spans several keys, raising :class:`ConfigError` as well.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, field
from typing import Any

from ellm.errors import ConfigError

__all__ = ["boolean", "boolean_or_auto", "integer", "is_int", "is_num", "non_negative", "number",
           "one_of", "parse", "parse_keywords", "positive", "probability", "valid"]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def valid(expected: str, ok: Callable[[Any], bool], default: Any = MISSING) -> Any:
    """A schema field: what a valid value is, in words (``expected``) and as a test (``ok``),
    and the value a missing key takes (none: the key is required)."""
    return field(default=default, metadata={"expected": expected, "ok": ok})


def integer(low: int, default: Any = MISSING) -> Any:
    return valid(f"an integer >= {low}", lambda v: is_int(v) and v >= low, default)


def boolean(default: Any = MISSING) -> Any:
    return valid("true or false", lambda v: isinstance(v, bool), default)


def probability(default: Any = MISSING) -> Any:
    return valid("a probability in [0, 1]", lambda v: is_num(v) and 0 <= v <= 1, default)


def number(default: Any = MISSING) -> Any:
    return valid("a number", is_num, default)


def positive(default: Any = MISSING) -> Any:
    return valid("a positive number", lambda v: is_num(v) and v > 0, default)


def non_negative(default: Any = MISSING) -> Any:
    return valid("a number >= 0", lambda v: is_num(v) and v >= 0, default)


def boolean_or_auto(default: Any = MISSING) -> Any:
    return valid("true, false or auto", lambda v: isinstance(v, bool) or v == "auto", default)


def one_of(*choices: Any, default: Any = MISSING) -> Any:
    return valid(f"one of {', '.join(map(str, choices))}", lambda v: v in choices, default)


def parse(schema: type, node: Any, prefix: str = "") -> Any:
    """An instance of the dataclass ``schema`` from a config node or a mapping, checking every
    field (a missing key takes the field's default, if it has one); the error names
    ``prefix + field``."""
    values = {}
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        if f.default is not MISSING and f.name not in node:
            values[f.name] = f.default
            continue
        value = node.get(f.name)
        try:
            good = f.metadata["ok"](value)
        except TypeError:
            good = False
        if not good:
            raise ConfigError(f"{key}={value!r} is invalid: expected {f.metadata['expected']}")
        values[f.name] = value
    return schema(**values)


def parse_keywords(schema: type, given: Mapping[str, Any], prefix: str = "",
                   ignored: Collection[str] = ()) -> Any:
    """:func:`parse` for keyword arguments, e.g. a config block as Hydra passes it to a class;
    a name that is neither a field nor ``ignored`` is a TypeError, as for any function."""
    names = {f.name for f in dataclasses.fields(schema)}
    unknown = sorted(set(given) - names - set(ignored))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}: {schema.__name__} has "
                        f"{sorted(names)}")
    return parse(schema, {key: value for key, value in given.items() if key in names}, prefix)
