"""``llf-metaworld-pick-place-v2``: Meta-World pick-place in the language-feedback contract, with
LLF-Bench's Meta-World semantics (the id of the Trace code-as-policy notebook); its actions,
feedback and differences from LLF-Bench are in docs/optimizers.md, "Targets"."""

from __future__ import annotations

import json
import math
import string
from typing import Any, ClassVar, Final

import gymnasium as gym
import numpy as np

from llm_in_the_loop.code_policy.metaworld_pick_place import PickPlace
from text_game import render
from text_game.llf import Feedback, feedback_kinds
from text_game.registration import as_registered
from text_game.spaces import TextField

ENV_ID: Final = "llf-metaworld-pick-place-v2"
INSTRUCTION_TYPES: Final = ("b",)
FEEDBACK_KINDS: Final = ("r", "hp", "hn", "fp")
SUBSTEPS, TOLERANCE = 20, 1e-4  # LLF-Bench's controller: at most 20 steps, or within 0.1 mm
# The largest number an action may hold: positions are metres from the table, the effort is in
# [-1, 1]; past this an LLM-written number is no action.
MAX_ACTION_VALUE: Final = 1e6
_TEXT = TextField(max_length=8192, min_length=0, charset=string.printable)
_OPTIONAL_TEXT = TextField(max_length=8192, min_length=0, charset=string.printable,
                           optional=True)
INSTRUCTION: Final = (
    "Control a Sawyer robot arm to pick up the puck and place it at the goal. Each step you "
    "see the robot and the world as a JSON object: hand_pos [x, y, z] (metres), "
    "gripper_distance_apart (0 closed to 1 open), puck_pos [x, y, z], puck_rot (a quaternion) "
    "and goal_pos [x, y, z]. Your action is 4 numbers [x, y, z, g]: the position the hand "
    "should move to, in absolute coordinates, and the gripper g (0 opens it, 1 closes it). A "
    "proportional controller moves the hand toward that position during the step.")


class PickPlaceLLFEnv(gym.Env):
    """Meta-World pick-place with language feedback."""

    metadata: ClassVar[dict[str, Any]] = dict(render.METADATA)  # a copy: gymnasium may edit it
    INSTRUCTION_TYPES: ClassVar[tuple[str, ...]] = INSTRUCTION_TYPES
    FEEDBACK_TYPES: ClassVar[tuple[str, ...]] = FEEDBACK_KINDS
    reward_range: tuple[float, float] = (0.0, 10.0)

    def __init__(self, instruction_type: str = "b", feedback_type: Any = "a",
                 visual: bool = False, length: int = 30, seed: int = 0,
                 render_mode: str | None = None) -> None:
        if visual is not False:
            raise ValueError(f"visual={visual!r} is invalid: this env has text observations "
                             "only; expected False")
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"length={length!r} is invalid: expected an integer >= 1")
        self.set_instruction_type(instruction_type)
        self.set_feedback_type(feedback_type)
        self.length = length
        self.render_mode = render.checked_render_mode(render_mode)
        self.sim = PickPlace(SUBSTEPS, seed, TOLERANCE, max_sim_steps=length * SUBSTEPS,
                             stop_on_success=False, render_mode=self.render_mode)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": _TEXT, "instruction": _OPTIONAL_TEXT, "feedback": _OPTIONAL_TEXT})
        self._steps: int | None = None  # None: no episode under way
        self._grip = 0.0  # the last effort played: a non-action keeps the grasp

    def set_instruction_type(self, instruction_type: str) -> None:
        if instruction_type not in INSTRUCTION_TYPES:
            raise ValueError(f"instruction_type={instruction_type!r} is invalid: expected one "
                             f"of {', '.join(INSTRUCTION_TYPES)}")
        self.instruction_type = instruction_type

    def set_feedback_type(self, feedback_type: Any) -> None:
        kinds = feedback_kinds(feedback_type)
        if feedback_type not in ("a", "m") and not set(kinds) <= set(FEEDBACK_KINDS):
            raise ValueError(f"feedback_type={feedback_type!r} is invalid here: Meta-World "
                             f"gives {', '.join(FEEDBACK_KINDS)} (and a, m, n)")
        self._kinds = tuple(k for k in kinds if k in FEEDBACK_KINDS)
        self.feedback_type = feedback_type if feedback_type in ("a", "m", "n") else set(kinds)

    @property
    def expert_action(self) -> np.ndarray:
        return np.asarray(self.sim.expert_action())

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        observation = self.sim.reset(seed)
        self._steps, self._grip = 0, 0.0
        return {"observation": json.dumps(observation), "instruction": INSTRUCTION,
                "feedback": None}, {"success": False}

    def step(self, action: Any):
        if self._steps is None or self._steps >= self.length:
            raise RuntimeError("step() called before reset() or after the episode ended: "
                               "call reset() to start one")
        before = np.asarray(self.sim.observation["hand_pos"])
        values = four_numbers(action)
        played = values if values is not None else [*before, self._grip]
        self._grip = played[3]
        move = self.sim.step(played)
        self._steps += 1
        feedback = self._feedback(move.last_reward, before, played)
        text = feedback.select(self._kinds, self.np_random if self.feedback_type == "m" else None)
        if values is None:
            notice = (f"{_shown(action)} is not an action: expected 4 numbers [x, y, z, g]; "
                      "the hand stayed where it was.")
            text = f"{notice} {text}".strip()
        obs = {"observation": json.dumps(move.obs), "instruction": None, "feedback": text}
        info = {"success": move.success, "valid_action": values is not None}
        return obs, move.last_reward, False, self._steps >= self.length, info

    def _feedback(self, reward: float, before: np.ndarray, action: list[float]) -> Feedback:
        """LLF-Bench's kinds, judged against the expert's action after the move."""
        expert = self.expert_action
        hand = np.asarray(self.sim.observation["hand_pos"])
        away = np.linalg.norm(expert[:3] - before) < np.linalg.norm(expert[:3] - hand)
        grip = None
        if expert[3] > 0.5 > action[3]:
            grip = "You should close the gripper."
        elif expert[3] < 0.5 < action[3]:
            grip = "You should open the gripper."
        feedback = Feedback(r=f"Your reward for the latest step is {reward:.2f}.")
        kind = "hn" if away else "hp"  # the gripper advice goes with the hindsight that speaks
        feedback.add(kind, "The hand moved away from where it should go." if away else
                     "The hand moved closer to where it should go.")
        feedback.add(kind, grip)
        target = ", ".join(f"{v:.3f}" for v in expert)
        feedback.fp = f"Next, move to [{target}]."
        return feedback

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:  # gymnasium's convention: no mode, no frame, a warning
            render.warn_no_render_mode(self, ENV_ID)
            return None
        return self.sim.render()

    def close(self) -> None:
        self.sim.close()


def four_numbers(action: Any) -> list[float] | None:
    try:
        values = [float(v) for v in action]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past float's range
        return None
    return values if len(values) == 4 and all(
        math.isfinite(v) and abs(v) <= MAX_ACTION_VALUE for v in values) else None


def _shown(action: Any) -> str:
    text = repr(action)
    return text if len(text) <= 60 else text[:57] + "..."


def make(**kwargs: Any) -> gym.Env:
    """The gymnasium entry point, in LLF-Bench's wrapper class where it is installed."""
    return as_registered(PickPlaceLLFEnv(**kwargs))
