"""The language-feedback (LLF-Bench) environment contract, shared by Crafter's and Housekeep's
language-feedback environments (``llf-crafter-v0``, ``llf-housekeep-v0``).

Written from LLF-Bench's documentation and code (Cheng et al., 2023), none of which is copied
here; its own ``tests/test_envs.py`` passes on both games (docs/llf.md). Where LLF-Bench is
installed, the envs come inside its wrapper class (:mod:`text_game.llf_bench`).

- ``make(id, instruction_type=..., feedback_type=..., visual=False)``; the env lists its types
  in ``INSTRUCTION_TYPES`` and ``FEEDBACK_TYPES`` (the five kinds, as LLF-Bench's envs do) and
  changes them with ``set_instruction_type`` (from the next reset) and ``set_feedback_type``
  (from the next step), or by assigning the attributes.
- ``reset(seed=, options=) -> (obs, info)`` with ``obs = {"observation": str, "instruction":
  str, "feedback": None}``; ``step(action: str) -> (obs, reward, terminated, truncated, info)``
  whose ``obs["instruction"]`` is None (the instruction comes with ``reset``), whose
  ``obs["feedback"]`` is a str (``''``: nothing to say) and whose ``info["success"]`` says
  whether the task is solved.
- The reward is for evaluating an agent, never for the agent to learn from; ``reward_range``
  bounds it.
- Instruction types: ``b`` basic, ``p`` partial (the basic instruction plus part of what the
  agent would otherwise have to learn from feedback), ``c`` complete (all of it).
- Feedback types: ``r`` the reward in words, ``hp`` hindsight positive (what the last action
  achieved), ``hn`` hindsight negative (what went wrong), ``fp`` future positive (what to do
  next), ``fn`` future negative (what to avoid next); ``a`` all of them, ``m`` one of those that
  have something to say, drawn at random each step, ``n`` none. A list, tuple or set of the five
  kinds (``("hp", "fp")``) gives those kinds. The feedback is ``''`` when nothing selected
  applies.
- Feedback names actions in double quotes (``"chop tree"``).
- Anything that is not an action (any string or object) gets a no-op step and a "not an
  action" notice at the head of the feedback whatever the feedback type, ``n`` included (as
  LLF-Bench's text wrapper answers "Cannot parse action"), never an exception. Only the first
  :data:`MAX_ACTION_CHARS` characters of an action are read. ``step`` before ``reset`` or after
  the episode's end raises RuntimeError.

A game subclasses :class:`LanguageFeedbackEnv` and implements ``_start`` and ``_play``; its
gymnasium entry point passes the env through :func:`text_game.registration.as_registered`.
"""

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
FEEDBACK_TYPES: Final = (*FEEDBACK_KINDS, "a", "m", "n")  # every value feedback_type takes
NO_OP: Final = "do nothing"
MAX_ACTION_CHARS: Final = 1024  # what is read of an action; longer text is never an action
_TEXT = TextField(max_length=8192, min_length=0, charset=string.printable)
# The instruction (None at a step) and the feedback (None at reset).
_OPTIONAL_TEXT = TextField(max_length=8192, min_length=0, charset=string.printable,
                           optional=True)


@dataclass
class Feedback:
    """One step's feedback of every kind (None: nothing to say of that kind)."""

    r: str | None = None
    hp: str | None = None
    hn: str | None = None
    fp: str | None = None
    fn: str | None = None

    def add(self, kind: str, text: str | None) -> None:
        """Append ``text`` to the feedback of ``kind``."""
        if text:
            old = getattr(self, kind)
            setattr(self, kind, f"{old} {text}" if old else text)

    def select(self, kinds: Sequence[str], pick_one: Any = None) -> str:
        """The texts of ``kinds`` joined in the order r, hp, hn, fp, fn (``''``: none); with
        ``pick_one`` (a numpy Generator) only one of those that have text, drawn at random."""
        texts = [getattr(self, f.name) for f in fields(self) if f.name in kinds]
        texts = [t for t in texts if t]
        if pick_one is not None and texts:
            texts = [texts[int(pick_one.integers(len(texts)))]]
        return " ".join(texts)


@dataclass
class Instructions:
    """A task's instruction: the basic one, and with part of (partial) or all (complete) of what
    the agent would otherwise learn from feedback."""

    basic: str
    partial: str = ""
    complete: str = ""


@dataclass
class Outcome:
    """What one game step did (the game fills it; the contract turns it into a step's return)."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    feedback: Feedback
    info: dict[str, Any] = field(default_factory=dict)


def feedback_kinds(feedback_type: Any) -> tuple[str, ...]:
    """The feedback kinds a ``feedback_type`` selects, in the order r, hp, hn, fp, fn;
    ValueError naming the valid ones."""
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
    """``action`` as a plain str; None when it has none (its ``__str__`` raises, or it nests too
    deep to print). Actions come from outside: no object may crash a step."""
    try:
        return str.__str__(action if isinstance(action, str) else str(action))
    except Exception:  # noqa: BLE001 - RecursionError, or whatever a foreign __str__ raises
        return None


def normalise_action(action: Any) -> str:
    """Lower case, single spaces, surrounding quotes, backticks and final full stop removed.
    Only the first :data:`MAX_ACTION_CHARS` characters are read, so the time is bounded
    whatever the length; a longer text ends in " ..." and so never equals an action."""
    text = action_text(action) or ""
    name = " ".join(text[:MAX_ACTION_CHARS].lower().split())
    name = name.strip("\"'`").rstrip(".!").strip()
    return f"{name} ..." if len(text) > MAX_ACTION_CHARS else name


def not_an_action(text: str | None) -> str:
    """The notice for an action that is not one (``text``: what was sent, None: no text)."""
    if text is None:
        what = "An object with no text"
    else:
        what = repr(text if len(text) <= 60 else text[:57] + "...")
    return (f"{what} is not an action, so nothing was done. "
            "Answer with exactly one action of the instruction's list.")


class LanguageFeedbackEnv(gym.Env):
    """The LLF-Bench contract (module docstring); a game implements the two hooks below.

    ``actions``: every valid action string (lower case), the no-op :data:`NO_OP` included;
    ``length``: the steps of an episode, which the game truncates there; ``visual``: only
    False, as the games have no image observation; ``render_mode``: None or ``rgb_array``
    (render() is the game's frame, as its training env renders it).
    """

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

    # ---- the types, as LLF-Bench sets them ------------------------------------------------
    @property
    def instruction_type(self) -> str:
        return self._instruction_type

    @instruction_type.setter
    def instruction_type(self, instruction_type: str) -> None:
        self.set_instruction_type(instruction_type)

    def set_instruction_type(self, instruction_type: str) -> None:
        """The instruction type of the episodes that start from now on."""
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
        """The feedback type of the steps from now on; read back as LLF-Bench's is: "a", "m",
        "n", or the set of kinds."""
        self._kinds = feedback_kinds(feedback_type)
        self._feedback_type = feedback_type if feedback_type in ("a", "m", "n") else set(
            self._kinds)

    # ---- hooks of a game ------------------------------------------------------------------
    def _start(self, seed: int | None, options: dict | None) -> tuple[str, Instructions, dict]:
        """Start an episode: (observation, the task's instructions, info)."""
        raise NotImplementedError

    def _play(self, action: str) -> Outcome:
        """Play ``action``, one of :attr:`actions` (the no-op in place of anything else)."""
        raise NotImplementedError

    def _frame(self) -> np.ndarray:
        """The game's frame now (``render_mode="rgb_array"``)."""
        raise NotImplementedError

    # ---- the contract ---------------------------------------------------------------------
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
        if self.render_mode is None:  # gymnasium's convention: no mode, no frame, a warning
            render.warn_no_render_mode(self, type(self).__name__)
            return None
        if not self._started:
            raise RuntimeError(f"{type(self).__name__}.render() called before reset()")
        return self._frame()

