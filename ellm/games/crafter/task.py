"""A single finetuning task on Crafter (``env_spec.single_task``; ELLM.md §4).

The reward is 1 when the executed action is the task (or its synonym) and was effective; with
``single_goal_hierarchical`` the goal walks the task's prerequisite chain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ellm.reward import Scored, StepData
from text_crafter import same_action
from text_crafter.tasks import CUSTOM_TASK_CHAINS, CUSTOM_TASKS, SINGLE_TASKS, TASK_CHAINS

__all__ = ["CUSTOM_TASKS", "CUSTOM_TASK_CHAINS", "SINGLE_TASKS", "SURVIVAL_REWARD", "TASK_CHAINS",
           "SingleTaskReward", "TaskGoals", "TaskReward"]

SURVIVAL_REWARD = 0.05
# The original skipped offsets with dx == dy, so one diagonal counts and the other not.
_ROW_OFFSETS = tuple((dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx != dy)

HIERARCHICAL_MODES = (False, True, "reward_last")


class SingleTaskReward:
    """Reward 1 for effectively executing the task (or the current subtask of its chain)."""

    def __init__(self, task: str, hierarchical: bool | str = False):
        if hierarchical not in HIERARCHICAL_MODES:
            raise ValueError(
                f"env_spec.single_goal_hierarchical must be one of {HIERARCHICAL_MODES}, "
                f"got {hierarchical!r}")
        self.task = task
        self.hierarchical = hierarchical
        self.chain = TASK_CHAINS.get(task, (task,)) if hierarchical else (task,)
        self.reset()

    def reset(self) -> None:
        self._index = 0
        self._trees_chopped = 0
        self._drank_water = False
        self.completed = False

    @property
    def goal(self) -> str:
        """The goal shown to the agent now."""
        return self.chain[min(self._index, len(self.chain) - 1)]

    def __call__(self, action_name: str, effective: bool,
                 info: Mapping[str, Any] | None = None) -> float:
        if self.task == "survival":
            return SURVIVAL_REWARD
        if not effective:
            return 0.0
        is_last = self._index >= len(self.chain) - 1
        achieved = same_action(action_name, self.goal)
        if self.task in CUSTOM_TASK_CHAINS:
            achieved, reward = self._custom(action_name, achieved, info or {})
        else:
            reward = float(achieved)
        if self.hierarchical == "reward_last" and not is_last:
            reward = 0.0
        if achieved and (is_last or not self.hierarchical):
            self.completed = True
        if achieved and self.hierarchical:
            self._index = min(self._index + 1, len(self.chain) - 1)
        return reward

    def _custom(self, action: str, achieved: bool,
                info: Mapping[str, Any]) -> tuple[bool, float]:
        """(achieved, reward) of a custom task's step, after the original's rules."""
        flat = not self.hierarchical
        if self.task == "plant row" and (flat or self._index == 3):
            return self._beside(action, ("place plant",), info, lambda m, o: o == "plant")
        if self.task == "make workshop" and (flat or self._index >= 2):
            return self._beside(action, ("place crafting table", "make crafting table"), info,
                                lambda m, o: m == "table")
        if self.task == "deforestation" and flat:
            self._trees_chopped += action == "chop tree"
            done = self._trees_chopped >= len(CUSTOM_TASK_CHAINS["deforestation"])
            return done, float(done)  # once done, every effective action pays, as it did
        if self.task == "vegetarianism":
            if not self._drank_water:
                if action == "drink water":
                    self._drank_water = True
                    return bool(self.hierarchical), float(self.hierarchical is True)
                return False, 0.0
            return (True, 1.0) if action == "chop grass" else (False, 0.0)
        if self.task == "chop grass with wood pickaxe" and self.goal == self.task:
            held = info.get("inventory", {}).get("wood_pickaxe", 0) > 0
            done = held and action == "chop grass"
            return done, float(done)
        return achieved, float(achieved)

    @staticmethod
    def _beside(action: str, actions: tuple[str, ...], info: Mapping[str, Any],
                counts) -> tuple[bool, float]:
        """Paid when ``action`` placed something next to a neighbour that ``counts``."""
        around = info.get("placed_neighbours", {})
        done = action in actions and any(counts(*around[o]) for o in _ROW_OFFSETS if o in around)
        return done, float(done)


class TaskGoals:
    """The goal source of a single-task run: the task's current (sub)goal."""

    def __init__(self, task: SingleTaskReward):
        self.task = task

    def reset(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
        self.task.reset()
        return self.observe(obs, info)

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any],
                achieved: Sequence[str] = ()) -> list[str]:
        return [self.task.goal]

    def metrics(self) -> dict[str, float]:
        return {}

    def answering_client(self) -> Any:
        return None

    def close(self) -> None:
        pass


class TaskReward:
    """The per-step reward of a single-task run (its goal source resets the task)."""

    name = "goal"
    per_step = True

    def __init__(self, task: SingleTaskReward):
        self.task = task

    def reset(self) -> None:
        pass

    def step(self, data: StepData) -> Scored:
        info = data.info
        return Scored(self.task(info["action_name"], info["effective_success"], info))

    def episode_metrics(self) -> dict[str, float]:
        """``task_success``: 1 if the episode did the whole task (a survival task has none)."""
        if self.task.task == "survival":
            return {}
        return {"task_success": float(self.task.completed)}
