"""What an answer must be (``constrained``): a JSON schema and a GBNF grammar of one answer."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

_JSON_CHAR: Final = r'''char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'''
_NUMBER: Final = r"-?\d+(?:\.\d+)?"


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    return json.dumps(text, ensure_ascii=True)


def alternatives(options: Sequence[str]) -> str:
    return " | ".join(literal(o) for o in options)


def _object_schema(properties: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly ``properties``, all required (OpenAI's strict mode asks this)."""
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class Constraint:
    """Base: ``name`` names the schema (OpenAI asks for one); subclasses give the renderings."""

    name: str

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def grammar(self) -> str:
        raise NotImplementedError

    def native(self, text: str) -> str | None:
        """The answer in text form when ``text`` is one the grammar allows, else None."""
        raise NotImplementedError

    def from_json(self, value: dict[str, Any]) -> str | None:
        """The text form of a JSON answer the schema allows, else None."""
        raise NotImplementedError

    def key(self) -> dict[str, Any]:
        """Both renderings: another constraint's answers are never served for this one."""
        return {"name": self.name, "schema": self.schema(), "grammar": self.grammar()}

    def read(self, text: str) -> str | None:
        """The text form of an answer that meets the constraint; None when it meets neither."""
        native = self.native(text)
        if native is not None:
            return native
        value = _json_object(text.strip())
        return None if value is None else self.from_json(value)


@dataclass(frozen=True)
class Choice(Constraint):
    """Exactly one of ``options`` (an action, "Yes" or "No")."""

    options: tuple[str, ...] = ()
    field: str = "answer"

    def schema(self) -> dict[str, Any]:
        return _object_schema({self.field: {"type": "string", "enum": list(self.options)}})

    def grammar(self) -> str:
        return f'root ::= " "? ({alternatives(self.options)})\n'

    def native(self, text: str) -> str | None:
        word = text.removeprefix(" ")
        return word if word in self.options else None

    def from_json(self, value: dict[str, Any]) -> str | None:
        word = value.get(self.field)
        return word if set(value) == {self.field} and word in self.options else None


@dataclass(frozen=True)
class GoalList(Constraint):
    """1 to ``max_items`` goals of ``vocabulary``, as "- goal" lines."""

    vocabulary: tuple[str, ...] = ()
    max_items: int = 1

    def schema(self) -> dict[str, Any]:
        goals = {"type": "array", "items": {"type": "string", "enum": list(self.vocabulary)},
                 "minItems": 1, "maxItems": self.max_items}
        return _object_schema({"goals": goals})

    def grammar(self) -> str:
        return (f'root ::= item{{1,{self.max_items}}} "\\n"?\n'
                'item ::= "- " goal "\\n"\n'
                f"goal ::= {alternatives(self.vocabulary)}\n")

    def _text(self, goals: list[Any]) -> str | None:
        if not 1 <= len(goals) <= self.max_items or any(g not in self.vocabulary for g in goals):
            return None
        return "".join(f"- {g}\n" for g in goals)

    def native(self, text: str) -> str | None:
        lines = text.rstrip("\n").split("\n")
        if not all(line.startswith("- ") for line in lines):
            return None
        return self._text([line[2:] for line in lines])

    def from_json(self, value: dict[str, Any]) -> str | None:
        goals = value.get("goals")
        if set(value) != {"goals"} or not isinstance(goals, list):
            return None
        return self._text(goals)


@dataclass(frozen=True)
class Setting(Constraint):
    """A number for each of ``names``, as "w0=1.5, w1=-2"."""

    names: tuple[str, ...] = ()
    low: float = -1.0
    high: float = 1.0
    decimals: int = 2

    def schema(self) -> dict[str, Any]:
        number = {"type": "number", "minimum": self.low, "maximum": self.high}
        return _object_schema({n: dict(number) for n in self.names})

    def grammar(self) -> str:
        digits = len(str(int(max(abs(self.low), abs(self.high)))))
        fraction = f' ("." [0-9]{{1,{self.decimals}}})?' if self.decimals else ""
        pairs = ' ", " '.join(f'{literal(n + "=")} num' for n in self.names)
        return f'root ::= " "? {pairs}\nnum ::= "-"? [0-9]{{1,{digits}}}{fraction}\n'

    def native(self, text: str) -> str | None:
        pattern = ", ".join(f"{re.escape(n)}=({_NUMBER})" for n in self.names)
        match = re.fullmatch(f" ?{pattern}", text)
        return None if match is None else text.removeprefix(" ")

    def from_json(self, value: dict[str, Any]) -> str | None:
        numbers = [value.get(n) for n in self.names]
        if set(value) != set(self.names) or not all(
                type(v) in (int, float) and math.isfinite(v) for v in numbers):
            return None
        return ", ".join(f"{n}={v}" for n, v in zip(self.names, numbers))


@dataclass(frozen=True)
class OptoPrimeAnswer(Constraint):
    """OptoPrime's answer, reasoning capped so a small model reaches the suggestion."""

    variables: tuple[str, ...] = ()
    prefix: str = ""
    max_reasoning: int = 400
    max_answer: int = 80

    def schema(self) -> dict[str, Any]:
        text = {"type": "string"}
        # ECMA-262 takes no escape of a space: escape only the special characters.
        pattern = "^" + re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", self.prefix)
        value = {**text, "pattern": pattern} if self.prefix else text
        suggestion = _object_schema({v: dict(value) for v in self.variables})
        return _object_schema({"reasoning": dict(text), "answer": dict(text),
                               "suggestion": suggestion})

    def grammar(self) -> str:
        start = literal(json.dumps(self.prefix)[1:-1]) + " " if self.prefix else ""
        pairs = ' "," ws '.join(f'{literal(json.dumps(v) + ":")} ws "\\"" {start}char* "\\""'
                                for v in self.variables)
        return (
            'root ::= "{" ws "\\"reasoning\\":" ws reasoning "," ws "\\"answer\\":" ws answer '
            f'"," ws "\\"suggestion\\":" ws "{{" ws {pairs} ws "}}" ws "}}"\n'
            f'reasoning ::= "\\"" char{{0,{self.max_reasoning}}} "\\""\n'
            f'answer ::= "\\"" char{{0,{self.max_answer}}} "\\""\n'
            f"{_JSON_CHAR}\n"
            'ws ::= [ \\t\\n]{0,8}\n')

    def native(self, text: str) -> str | None:
        value = _json_object(text.strip())
        return None if value is None else self.from_json(value)

    def from_json(self, value: dict[str, Any]) -> str | None:
        suggestion = value.get("suggestion")
        if (set(value) != {"reasoning", "answer", "suggestion"}
                or not all(isinstance(value[k], str) for k in ("reasoning", "answer"))
                or not isinstance(suggestion, dict) or set(suggestion) != set(self.variables)
                or not all(isinstance(v, str) and v.startswith(self.prefix)
                           for v in suggestion.values())):
            return None
        return json.dumps(value)


YES_NO: Final = Choice("yes_no", options=("Yes", "No"))


def yes_no_word(text: str) -> str | None:
    """The lenient reading of a yes/no answer that broke its constraint: its first word."""
    words = text.split()
    word = words[0].strip(".,:;!\"'").lower() if words else ""
    return {"yes": "Yes", "no": "No"}.get(word)
