"""Typed config schemas whose fields say what a valid value is, so errors name the key."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, field
from typing import Any

from ellm.errors import ConfigError

__all__ = ["MAX_COUNT", "MAX_WIDTH", "boolean", "boolean_or_auto", "integer", "is_int", "is_num",
           "non_negative", "number", "one_of", "parse", "parse_keywords", "positive",
           "probability", "valid"]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def valid(expected: str, ok: Callable[[Any], bool], default: Any = MISSING,
          convert: Callable[[Any], Any] | None = None) -> Any:
    """A schema field: what a valid value is (words and test) and a missing key's default;
    ``convert`` first turns a given value into the field's type (raising on one it cannot)."""
    return field(default=default, metadata={"expected": expected, "ok": ok, "convert": convert})


# The largest count any key may hold unless it says less: floats are exact up to it, and
# numpy's and torch's int64 hold it.
MAX_COUNT = 2**53
# The widest layer a key may ask for: 8x the paper's 512; its weights, target copy and Adam's
# moments are about 2 GB at 4096.
MAX_WIDTH = 4096


def integer(low: int, default: Any = MISSING, high: int = MAX_COUNT) -> Any:
    expected = (f"an integer >= {low} (at most 2**53)" if high == MAX_COUNT
                else f"an integer in [{low}, {high}]")
    return valid(expected, lambda v: is_int(v) and low <= v <= high, default)


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


def parse(schema: type, node: Any, prefix: str = "",
          keys: Mapping[str, str] | None = None) -> Any:
    """An instance of ``schema`` from a config node, every field checked; errors name the key
    (``keys``: the key to name for a field whose value the user sets elsewhere)."""
    values = {}
    for f in dataclasses.fields(schema):
        key = (keys or {}).get(f.name, f"{prefix}{f.name}")
        if f.default is not MISSING and f.name not in node:
            values[f.name] = f.default
            continue
        given = value = node.get(f.name)
        convert = f.metadata.get("convert")
        try:
            if convert is not None:
                value = convert(value)
            good = f.metadata["ok"](value)
        except (TypeError, ValueError, AttributeError, ArithmeticError):
            good = False
        if not good:
            raise ConfigError(f"{key}={given!r} is invalid: expected {f.metadata['expected']}")
        values[f.name] = value
    return schema(**values)


def parse_keywords(schema: type, given: Mapping[str, Any], prefix: str = "",
                   ignored: Collection[str] = ()) -> Any:
    """``parse`` for keyword arguments; an unknown name is a TypeError, as for any function."""
    names = {f.name for f in dataclasses.fields(schema)}
    unknown = sorted(set(given) - names - set(ignored))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}: {schema.__name__} has "
                        f"{sorted(names)}")
    return parse(schema, {key: value for key, value in given.items() if key in names}, prefix)
