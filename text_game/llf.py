"""The language-feedback (LLF-Bench) env contract both games' ``llf-*-v0`` share (docs/llf.md)."""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Final

import gymnasium as gym
import numpy as np

from text_game import render
from text_game.spaces import TextField

INSTRUCTION_TYPES: Final = ("b", "p", "c")
FEEDBACK_KINDS: Final = ("r", "hp", "hn", "fp", "fn")
FEEDBACK_TYPES: Final = (*FEEDBACK_KINDS, "a", "m", "n")
NO_OP: Final = "do nothing"
MAX_ACTION_CHARS: Final = 1024  # what is read of an action; longer text is never an action
_TEXT = TextField(max_length=8192, min_length=0, charset=string.printable)
_OPTIONAL_TEXT = TextField(max_length=8192, min_length=0, charset=string.printable,
                           optional=True)


@dataclass
class Feedback:

    r: str | None = None
    hp: str | None = None
    hn: str | None = None
    fp: str | None = None
    fn: str | None = None

    def add(self, kind: str, text: str | None) -> None:
        if text:
            old = getattr(self, kind)
            setattr(self, kind, f"{old} {text}" if old else text)

    def select(self, kinds: Sequence[str], pick_one: Any = None) -> str:
        texts = [getattr(self, f.name) for f in fields(self) if f.name in kinds]
        texts = [t for t in texts if t]
        if pick_one is not None and texts:
            texts = [texts[int(pick_one.integers(len(texts)))]]
        return " ".join(texts)


@dataclass
class Instructions:

    basic: str
    partial: str = ""
    complete: str = ""


@dataclass
class Outcome:

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    feedback: Feedback
    info: dict[str, Any] = field(default_factory=dict)


def feedback_kinds(feedback_type: Any) -> tuple[str, ...]:
    if isinstance(feedback_type, str):
        if feedback_type in FEEDBACK_KINDS:
            return (feedback_type,)
        if feedback_type in ("a", "m"):
            return FEEDBACK_KINDS
        if feedback_type == "n":
            return ()
    elif isinstance(feedback_type, (Sequence, AbstractSet)) and feedback_type and all(
            isinstance(k, str) and k in FEEDBACK_KINDS for k in feedback_type):
        return tuple(k for k in FEEDBACK_KINDS if k in feedback_type)
    raise ValueError(f"feedback_type={feedback_type!r} is invalid: expected one of "
                     f"{', '.join(FEEDBACK_TYPES)} or a list of {', '.join(FEEDBACK_KINDS)}")


def action_text(action: Any) -> str | None:
    """``action`` as a str, or None: actions come from outside, and none may crash a step."""
    try:
        return str.__str__(action if isinstance(action, str) else str(action))
    except Exception:  # noqa: BLE001 - RecursionError, or whatever a foreign __str__ raises
        return None


def normalise_action(action: Any) -> str:
    text = action_text(action) or ""
    name = " ".join(text[:MAX_ACTION_CHARS].lower().split())
    name = name.strip("\"'`").rstrip(".!").strip()
    return f"{name} ..." if len(text) > MAX_ACTION_CHARS else name


def not_an_action(text: str | None) -> str:
    if text is None:
        what = "An object with no text"
    else:
        what = repr(text if len(text) <= 60 else text[:57] + "...")
    return (f"{what} is not an action, so nothing was done. "
            "Answer with exactly one action of the instruction's list.")


class LanguageFeedbackEnv(gym.Env):
    """The LLF-Bench contract; a game implements ``_start``, ``_play`` and ``_frame``."""

    metadata: ClassVar[dict[str, Any]] = dict(render.METADATA)  # a copy: gymnasium may edit it
    INSTRUCTION_TYPES: ClassVar[tuple[str, ...]] = INSTRUCTION_TYPES
    # LLF-Bench's meaning: the five kinds; "a", "m" and "n" are accepted on top of them.
    FEEDBACK_TYPES: ClassVar[tuple[str, ...]] = FEEDBACK_KINDS
    reward_range: tuple[float, float] = (-math.inf, math.inf)
    actions: tuple[str, ...] = (NO_OP,)

    def __init__(self, instruction_type: str = "b", feedback_type: Any = "a", length: int = 100,
                 visual: bool = False, render_mode: str | None = None):
        self.render_mode = render.checked_render_mode(render_mode)
        if visual is not False:
            raise ValueError(f"visual={visual!r} is invalid: these games have text observations "
                             "only; expected False")
        self.instruction_type = instruction_type
        self.feedback_type = feedback_type
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"length={length!r} is invalid: expected an integer >= 1")
        self.length = length
        self.action_space = gym.spaces.Text(max_length=MAX_ACTION_CHARS, min_length=0,
                                            charset=string.printable)
        self.observation_space = gym.spaces.Dict(
            {"observation": _TEXT, "instruction": _OPTIONAL_TEXT, "feedback": _OPTIONAL_TEXT})
        self._started = False
        self._over = False

    @property
    def instruction_type(self) -> str:
        return self._instruction_type

    @instruction_type.setter
    def instruction_type(self, instruction_type: str) -> None:
        self.set_instruction_type(instruction_type)

    def set_instruction_type(self, instruction_type: str) -> None:
        if instruction_type not in INSTRUCTION_TYPES:
            raise ValueError(f"instruction_type={instruction_type!r} is invalid: expected one "
                             f"of {', '.join(INSTRUCTION_TYPES)}")
        self._instruction_type = instruction_type

    @property
    def feedback_type(self) -> Any:
        return self._feedback_type

    @feedback_type.setter
    def feedback_type(self, feedback_type: Any) -> None:
        self.set_feedback_type(feedback_type)

    def set_feedback_type(self, feedback_type: Any) -> None:
        self._kinds = feedback_kinds(feedback_type)
        self._feedback_type = feedback_type if feedback_type in ("a", "m", "n") else set(
            self._kinds)

    def _start(self, seed: int | None, options: dict | None) -> tuple[str, Instructions, dict]:
        raise NotImplementedError

    def _play(self, action: str) -> Outcome:
        raise NotImplementedError

    def _frame(self) -> np.ndarray:
        raise NotImplementedError

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        observation, instructions, info = self._start(seed, options)
        self._started, self._over = True, False
        self.instruction = self._instruction(instructions)
        info = {**info, "success": False}
        return {"observation": observation, "instruction": self.instruction,
                "feedback": None}, info

    def step(self, action: str):
        if not self._started:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset(): call "
                               "reset() to start an episode")
        if self._over:
            raise RuntimeError(f"{type(self).__name__}.step() called after the episode ended "
                               "(terminated or truncated): call reset() to start a new one")
        text = action_text(action)
        name = None if text is None else normalise_action(text)
        valid = name in self.actions
        played = name if valid else NO_OP
        out = self._play(played)
        self._over = out.terminated or out.truncated
        pick = self.np_random if self.feedback_type == "m" else None
        feedback = out.feedback.select(self._kinds, pick)
        if not valid:
            feedback = " ".join(t for t in (not_an_action(text), feedback) if t)
        obs = {"observation": out.observation, "instruction": None, "feedback": feedback}
        info = {**out.info, "success": out.success, "valid_action": valid, "action": played}
        return obs, float(out.reward), out.terminated, out.truncated, info

    def _instruction(self, instructions: Instructions) -> str:
        if self.instruction_type == "p" and instructions.partial:
            return instructions.partial
        if self.instruction_type == "c" and instructions.complete:
            return instructions.complete
        return instructions.basic

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            render.warn_no_render_mode(self, type(self).__name__)
            return None
        if not self._started:
            raise RuntimeError(f"{type(self).__name__}.render() called before reset()")
        return self._frame()

