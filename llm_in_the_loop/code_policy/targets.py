"""Code as policy: a language model rewrites a policy function from language feedback after each
rollout (Trace's OptoPrime optimiser, package ``trace-opt``): the feedback and the targets are
in docs/optimizers.md, "Code as policy"."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import gymnasium as gym
import numpy as np

import text_crafter
from llm_in_the_loop.code_policy.metaworld_llf_env import MAX_ACTION_VALUE, four_numbers
from llm_in_the_loop.code_policy.metaworld_pick_place import PickPlace
from llm_in_the_loop.code_policy.sandbox import Sandbox

log = logging.getLogger(__name__)

Policy = Callable[[Any], tuple[Any, str | None]]  # observation -> (action, error or None)
MAX_SHOWN: Final = 600  # characters of one observation or action in the feedback

METAWORLD_CODE: Final = '''def controller(obs):
    """Chooses the next action of the robot arm.

    obs: a dict with "hand_pos" [x, y, z] (metres), "gripper_distance_apart" (0 closed to 1
    open), "puck_pos" [x, y, z], "puck_rot" (a quaternion) and "goal_pos" [x, y, z].
    Returns [x, y, z, g]: where the hand should move next and the gripper effort g, from -1
    (open) to 1 (closed).
    """
    return obs["hand_pos"] + [-1.0]
'''
CRAFTER_CODE: Final = '''def act(obs):
    """Chooses the next action in the Crafter text game.

    obs: a dict with "observation" (what the player sees, where the nearest things are, its
    inventory and vitals, in words) and "feedback" (words about the previous action; None at
    the start). Returns one action name, such as "move left", "chop tree" or
    "place crafting table".
    """
    return "do nothing"
'''


@dataclass(frozen=True)
class StepRecord:
    observation: Any
    action: Any
    feedback: str | None


@dataclass(frozen=True)
class Move:
    """One step of a target; ``record`` is None when the action was refused (``error``)."""

    record: StepRecord | None
    obs: Any = None
    reward: float = 0.0
    done: bool = False
    success: bool = False
    error: str | None = None


@dataclass
class EpisodeRecord:
    """One episode of a policy: its steps, return, success and the error that ended it."""

    steps: list[StepRecord] = field(default_factory=list)
    ret: float = 0.0
    success: bool = False
    error: str | None = None

    def summary(self) -> str:
        done = "task done" if self.success else "task not done"
        text = f"return {self.ret:.2f} in {len(self.steps)} steps, {done}"
        return text + (f"; the code failed: {self.error}" if self.error else "")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + " ..."


def feedback_text(rollout: EpisodeRecord, shown: int) -> str:
    """The feedback OptoPrime gets: the outcome, the error and ``shown`` steps of the rollout."""
    n = len(rollout.steps)
    outcome = "done" if rollout.success else "not done"
    ended = f"The episode ended after {n} steps with return {rollout.ret:.2f}; the task was "
    lines = [ended + f"{outcome}."]
    if rollout.error:
        lines.append(f"Your code raised an error at step {n + 1}, which stopped the episode: "
                     f"{rollout.error}")
    if n and shown:
        picks = sorted({round(i) for i in np.linspace(0, n - 1, min(shown, n))})
        lines.append(f"Some of the {n} steps:")
        for i in picks:
            step = rollout.steps[i]
            line = (f"Step {i + 1}: observation {_short(step.observation)}; your action "
                    f"{_short(step.action)}")
            lines.append(line + (f"; feedback: {step.feedback}" if step.feedback else ""))
    return "\n".join(lines)


def step_feedback(obs: Any, move: Move) -> str:
    """The feedback on one step, in the notebook's words; or the code's error."""
    if move.record is None:
        return f"Your code failed, so no action was taken: {move.error}"
    text = (f"Taking action {_short(move.record.action)} at observation {_short(obs)} resulted "
            f"in next observation {_short(move.obs)}.")
    if move.record.feedback:
        text += f" Received feedback: {move.record.feedback}"
    return text + (" The task is done." if move.success else "")


class CodeTarget(Protocol):
    """An environment whose policy is code, with scripted and random references."""

    game: str
    game_label: str
    entry: str           # the function the code defines
    initial_code: str
    objective: str       # for OptoPrime's instruction
    length: int

    def reset(self, seed: int) -> Any:
        """A new episode; the observation the code reads."""

    def step(self, obs: Any, action: Any) -> Move:
        """Play the code's answer to ``obs`` (an error Move when it is not an action)."""

    def rollout(self, policy: Policy, seed: int) -> EpisodeRecord: ...

    def expert(self) -> Policy | None: ...

    def random(self, rng: np.random.Generator) -> Policy: ...

    def close(self) -> None: ...


class SteppedTarget:
    """A target's rollout, written once from its ``reset`` and ``step``."""

    def reset(self, seed: int) -> Any:
        raise NotImplementedError

    def step(self, obs: Any, action: Any) -> Move:
        raise NotImplementedError

    def rollout(self, policy: Policy, seed: int) -> EpisodeRecord:
        """One episode of ``policy``; the code's first error ends it."""
        out = EpisodeRecord()
        obs = self.reset(seed)
        while True:
            action, error = policy(obs)
            move = Move(None, error=error) if error is not None else self.step(obs, action)
            if move.record is None:
                out.error = move.error
                return out
            out.steps.append(move.record)
            out.ret += move.reward
            out.success = out.success or move.success
            obs = move.obs
            if move.done:
                return out


class MetaWorldTarget(SteppedTarget):
    """Meta-World pick-place with expert feedback."""

    game, game_label, entry = "metaworld", "Meta-World", "controller"
    initial_code = METAWORLD_CODE

    def __init__(self, horizon: int, substeps: int, seed: int) -> None:
        self.horizon = self.length = horizon
        self._steps = 0
        self.env = PickPlace(substeps=substeps, seed=seed)
        self.objective = _pick_place_objective(
            horizon, "rollouts of your controller and, at some steps, where the scripted expert "
            "would have sent the hand; each action moves the hand toward [x, y, z] for a short "
            "while.")

    def reset(self, seed: int) -> Any:
        self._steps = 0
        return self.env.reset(seed)

    def step(self, obs: Any, action: Any) -> Move:
        values, error = _target(action)
        if values is None:
            return Move(None, error=error)
        step = self.env.step(values)
        self._steps += 1
        return Move(StepRecord(obs, values, step.feedback), step.obs, step.reward,
                    step.success or self._steps >= self.horizon, step.success)

    def expert(self) -> Policy:
        return lambda obs: (self.env.expert_action(), None)

    def random(self, rng: np.random.Generator) -> Policy:
        def act(obs: Any) -> tuple[Any, str | None]:
            return [float(rng.uniform(-0.3, 0.3)), float(rng.uniform(0.4, 0.9)),
                    float(rng.uniform(0.02, 0.3)), float(rng.uniform(-1, 1))], None
        return act

    def close(self) -> None:
        self.env.close()


def _pick_place_objective(horizon: int, feedback: str) -> str:
    return ("Change the code of controller so that the robot arm grasps the puck and places it "
            f"at the goal position within {horizon} actions. The feedback reports {feedback}")


class LLFMetaWorldTarget(SteppedTarget):
    """``llf-metaworld-pick-place-v2``, the notebook's env, its observation decoded from JSON."""

    game, game_label, entry = "metaworld", "Meta-World", "controller"
    initial_code = METAWORLD_CODE

    def __init__(self, horizon: int, feedback_type: str) -> None:
        from llm_in_the_loop.code_policy.metaworld_llf_env import ENV_ID

        self.length = horizon
        self.env = gym.make(ENV_ID, feedback_type=feedback_type, length=horizon)
        self.objective = _pick_place_objective(
            horizon, "what your controller did and what the environment said about it; each "
            "action moves the hand toward [x, y, z] with a proportional controller.")

    def reset(self, seed: int) -> Any:
        obs, _ = self.env.reset(seed=seed)
        return json.loads(obs["observation"])

    def step(self, obs: Any, action: Any) -> Move:
        values, error = _target(action)
        if values is None:
            return Move(None, error=error)
        new, reward, terminated, truncated, info = self.env.step(values)
        return Move(StepRecord(obs, values, new["feedback"]), json.loads(new["observation"]),
                    float(reward), terminated or truncated or info["success"], info["success"])

    def expert(self) -> Policy:
        return lambda obs: (self.env.unwrapped.expert_action.tolist(), None)

    def random(self, rng: np.random.Generator) -> Policy:
        return lambda obs: (rng.uniform(-1.0, 1.0, 4).tolist(), None)

    def close(self) -> None:
        self.env.close()


def _target(action: Any) -> tuple[list[float] | None, str | None]:
    """An action as 4 finite numbers, or the error in words."""
    values = four_numbers(action)
    if values is None:
        return None, (f"controller returned {_short(action)}, but it must return 4 numbers "
                      f"[x, y, z, g], each at most {MAX_ACTION_VALUE:g} in size")
    return values, None


class CrafterTarget(SteppedTarget):
    """``llf-crafter-v0`` with one task; the code reads the observation and the feedback."""

    game, game_label, entry = "crafter", "", "act"
    initial_code = CRAFTER_CODE

    def __init__(self, task: str, length: int, version: int, feedback_type: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.env = gym.make(text_crafter.LLF_ENV_ID, task=task, length=length,
                                version=version, feedback_type=feedback_type)
        self.task, self.length = task, length
        self.objective = (
            f'Change the code of act so that the player completes the task "{task}" in the '
            f"Crafter text game within {length} steps. The feedback reports rollouts of your "
            "code with the game's feedback at some steps. Valid actions include \"move "
            "left\", \"move right\", \"move up\", \"move down\", \"do nothing\", \"chop tree\", "
            "\"place crafting table\", \"make wood pickaxe\", \"drink water\", \"attack cow\", "
            "\"mine stone\", \"sleep\".")

    def reset(self, seed: int) -> Any:
        obs, _ = self.env.reset(seed=seed)
        return {"observation": obs["observation"], "feedback": None}

    def step(self, obs: Any, action: Any) -> Move:
        if not isinstance(action, str):
            return Move(None, error=f"act returned {_short(action)}, but it must return an "
                                    "action name")
        new, reward, terminated, truncated, info = self.env.step(action)
        done = terminated or truncated
        return Move(StepRecord(obs["observation"], action, new["feedback"]),
                    {"observation": new["observation"], "feedback": new["feedback"]},
                    float(reward), done, done and bool(info["success"]))

    def expert(self) -> Policy | None:
        return None  # llf_run's policy=scripted is the feedback-following reference

    def random(self, rng: np.random.Generator) -> Policy:
        actions = self.env.unwrapped.actions
        return lambda obs: (actions[int(rng.integers(len(actions)))], None)

    def close(self) -> None:
        self.env.close()


def sandboxed(box: Sandbox) -> Policy:
    """The policy of the code loaded in ``box``: its errors and time-outs come back as text."""

    def act(obs: Any) -> tuple[Any, str | None]:
        outcome = box.call(obs)
        return outcome.value, outcome.error

    return act
