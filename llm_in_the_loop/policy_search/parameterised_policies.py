"""The small parameterised policies that policy search tunes, one per environment, each with
the episode return the search maximises (docs/optimizers.md, "The policies")."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import gymnasium as gym
import numpy as np
from crafter import constants

import text_crafter
from llm_in_the_loop.policy_search.parameters import ParameterSpace
from text_crafter.llf import CURRICULUM
from text_crafter.tasks import task_chain

ACHIEVEMENT_OF: Final = {action: name for name, action in CURRICULUM.items()}
MOVES: Final = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
INTERACT: Final = {"tree": "chop tree", "water": "drink water", "cow": "attack cow"}


@dataclass(frozen=True)
class EpisodeResult:
    ret: float
    steps: int
    success: bool


class SearchTask(Protocol):
    env_id: str
    game: str                 # the report groups runs by it
    game_label: str
    space: ParameterSpace
    description: str          # the policy in words, for the prompt

    def episode(self, params: Sequence[float], seed: int) -> EpisodeResult:
        """Play one episode with the policy of ``params`` on the world of ``seed``."""

    def close(self) -> None: ...


class GymLinearTask:
    """A linear policy on a gymnasium control task."""

    def __init__(self, env_id: str, low: float, high: float, decimals: int,
                 max_episode_steps: int | None = None, clip_action: bool = False) -> None:
        self.env_id = env_id
        self.clip_action = clip_action
        self.env = gym.make(env_id, max_episode_steps=max_episode_steps)
        if env_id == "MountainCarContinuous-v0":
            self.game, self.game_label, names = "mountaincar", "MountainCar", ("w0", "w1")
            fuel = ("the force clipped to [-1, 1]" if clip_action
                    else "the force as given (the engine itself applies at most 1)")
            self.description = ("The car's engine force each step is w0 * position + w1 * "
                                "velocity; the episode returns 100 for reaching the flag on "
                                f"the hill minus the fuel used, 0.1 * force^2 a step on {fuel}.")
        elif env_id == "CartPole-v1":
            self.game, self.game_label = "cartpole", "CartPole"
            names = ("w0", "w1", "w2", "w3", "b")
            self.description = ("The cart is pushed right when w0 * cart_position + w1 * "
                                "cart_velocity + w2 * pole_angle + w3 * pole_angular_velocity "
                                "+ b > 0, else left; the return is the number of steps the pole "
                                "stays up.")
        else:
            raise ValueError(f"no linear policy for {env_id!r}")
        if clip_action and self.game != "mountaincar":
            raise ValueError(f"clip_action is for MountainCarContinuous-v0; {env_id}'s action "
                             "is a discrete push, never clipped")
        self.space = ParameterSpace(names, low, high, decimals)

    def act(self, params: np.ndarray, obs: np.ndarray) -> Any:
        if self.game == "mountaincar":
            force = np.array([params @ obs])
            return np.clip(force, -1.0, 1.0).astype(np.float32) if self.clip_action else force
        return int(params[:4] @ obs + params[4] > 0)

    def episode(self, params: Sequence[float], seed: int) -> EpisodeResult:
        weights = np.asarray(params, dtype=float)
        obs, _ = self.env.reset(seed=seed)
        total, steps = 0.0, 0
        while True:
            obs, reward, terminated, truncated, _ = self.env.step(self.act(weights, obs))
            total += float(reward)
            steps += 1
            if terminated or truncated:
                break
        success = bool(terminated) if self.game == "mountaincar" else not terminated
        return EpisodeResult(total, steps, success)

    def close(self) -> None:
        self.env.close()


@dataclass
class CrafterView:
    nearest: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (dx, dy)
    facing: str | None = None
    inventory: dict[str, int] = field(default_factory=dict)


_NEAREST = re.compile(r"Nearest: ([^.]*)\.")
_FACING = re.compile(r"You are targeting ([a-z ]+)\.")
_INVENTORY = re.compile(r"Inventory: ([^.]*)\.")
_VITALS = re.compile(r"(health|food|drink|energy) (\d)/9")
_OFFSET = re.compile(r"(\d+) steps? (left|right|up|down)")


def read_view(observation: str) -> CrafterView:
    """The nearest thing of each kind (offsets), what the player faces, inventory and vitals."""
    view = CrafterView()
    nearest = _NEAREST.search(observation)
    for item in nearest.group(1).split("; ") if nearest else ():
        name = re.split(r" (?=\d)| here$", item)[0]
        dx = dy = 0
        for n, way in _OFFSET.findall(item):
            ux, uy = MOVES[way]
            dx, dy = dx + ux * int(n), dy + uy * int(n)
        view.nearest[name.replace("crafting table", "table")] = (dx, dy)
    facing = _FACING.search(observation)
    view.facing = facing.group(1).replace("crafting table", "table") if facing else None
    held = _INVENTORY.search(observation)
    for item in held.group(1).split(", ") if held and held.group(1) != "empty" else ():
        n, _, name = item.partition(" ")
        view.inventory[name.replace(" ", "_")] = int(n)
    view.inventory.update({k: int(v) for k, v in _VITALS.findall(observation)})
    return view


class Forager:
    """The forager policy of one parameter setting."""

    def __init__(self, params: Sequence[float], rng: np.random.Generator, table_cost: int):
        tree, water, cow, wood, persistence = (float(p) for p in params)
        self.pull = {"tree": tree, "water": water, "cow": cow}
        self.wood_for_table = max(table_cost, round(wood))
        self.keep_heading = min(max(persistence / 10.0, 0.0), 1.0)
        self.rng = rng
        self.heading = "left"
        self.last: tuple[str, int] | None = None  # (action, wood before it)

    def act(self, observation: str) -> str:
        view = read_view(observation)
        action = self._choose(view)
        self.last = (action, view.inventory.get("wood", 0))
        return action

    def _choose(self, view: CrafterView) -> str:
        wood = view.inventory.get("wood", 0)
        table = view.nearest.get("table")
        reach = table is not None and max(abs(table[0]), abs(table[1])) <= 1
        failed_place = self.last == ("place crafting table", wood)
        if reach and wood >= 1:
            return "make wood pickaxe"
        if not reach and wood >= self.wood_for_table and not failed_place:
            return "place crafting table"
        if table is not None and wood >= 1 and not reach:
            return self._move_toward(table)
        thing = view.facing
        if thing in INTERACT and self.pull[thing] > 0 and not (
                thing == "water" and view.inventory.get("drink", 0) >= 9):
            return INTERACT[thing]
        scores = dict.fromkeys(MOVES, 0.0)
        for kind, weight in self.pull.items():
            if weight > 0 and kind in view.nearest:
                dx, dy = view.nearest[kind]
                for way in self._ways(dx, dy):
                    scores[way] += weight / (1 + abs(dx) + abs(dy))
        best = max(scores, key=scores.__getitem__)
        if scores[best] > 0:
            return f"move {best}"
        if failed_place or self.rng.random() >= self.keep_heading:
            self.heading = str(self.rng.choice(list(MOVES)))
        return f"move {self.heading}"

    def _move_toward(self, offset: tuple[int, int]) -> str:
        return f"move {self._ways(*offset)[0]}"

    @staticmethod
    def _ways(dx: int, dy: int) -> list[str]:
        ways = []
        if dx:
            ways.append("left" if dx < 0 else "right")
        if dy:
            ways.append("up" if dy < 0 else "down")
        return sorted(ways, key=lambda w: -abs(dx if w in ("left", "right") else dy)) or ["left"]


class CrafterForagerTask:
    """The forager on ``llf-crafter-v0`` with one task."""

    env_id = text_crafter.LLF_ENV_ID
    game, game_label = "crafter", ""

    def __init__(self, task: str, length: int, version: int, decimals: int) -> None:
        if task != "make wood pickaxe" and not set(task_chain(task)) <= {
                "chop tree", "place crafting table", "make wood pickaxe"}:
            raise ValueError(f"the forager plays tasks made of chopping trees, placing a table "
                             f"and making a wood pickaxe, not {task!r}")
        self.task, self.length = task, length
        self.env = gym.make(self.env_id, task=task, version=version, length=length,
                            feedback_type="n")
        self.table_cost = 1 if version == 1 else int(constants.place["table"]["uses"]["wood"])
        self.achievements = tuple(dict.fromkeys(ACHIEVEMENT_OF[a] for a in task_chain(task)))
        self.space = ParameterSpace(("tree", "water", "cow", "wood", "persistence"), 0.0, 10.0,
                                    decimals)
        self.description = (
            f'A Crafter player must "{task}" within {length} steps. Its policy walks toward the '
            "nearest tree, water and cow in view with strengths tree, water and cow (0 ignores "
            "that kind; facing one it chops, drinks or attacks it), gathers about `wood` wood "
            "before placing a crafting table, and when nothing pulls it keeps its heading with "
            "probability persistence / 10. The return counts the task's achievements "
            f"({', '.join(a.replace('_', ' ') for a in self.achievements)}) plus the fraction "
            "of the episode left when the task is done.")

    def episode(self, params: Sequence[float], seed: int) -> EpisodeResult:
        obs, _ = self.env.reset(seed=seed)
        policy = Forager(params, np.random.default_rng(seed), self.table_cost)
        steps = 0
        while True:
            obs, _, terminated, truncated, info = self.env.step(policy.act(obs["observation"]))
            steps += 1
            if terminated or truncated:
                break
        unlocked = sum(info["achievements"].get(a, 0) > 0 for a in self.achievements)
        success = bool(info["success"])
        ret = unlocked + (1 - steps / self.length if success else 0.0)
        return EpisodeResult(float(ret), steps, success)

    def close(self) -> None:
        self.env.close()
