"""ELLM's intrinsic rewards (ELLM.md §4).

- :class:`GoalReward` (pretraining): the cosine similarity between the SBERT embedding of the
  step's transition caption and the embeddings of the goals suggested at the *previous* step,
  if above ``threshold`` (0.99), else 0. The reward is the cosine itself (about 0.99-1.0).
  A caption is also compared under its synonym ("attack cow" for "eat cow"), so a goal phrased
  either way is achieved by the one game action. The matched goal is returned so the caller can
  mark it achieved (the novelty bonus: it pays at most once per episode).
- :class:`SingleTaskReward` (finetuning, ``env_spec.single_task``): the goal shown is the task;
  the reward is 1 when the executed action is the task (or its synonym) and was effective.
  With ``single_goal_hierarchical`` the goal shown walks the task's prerequisite chain
  (:data:`TASK_CHAINS`, game data of :mod:`text_crafter.tasks`); ``True`` pays every subtask,
  ``"reward_last"`` only the task itself.

The success gate (v1: plausible, v2: effective success) is applied by the environment, which
only writes a transition caption when the gate passes; the Novelty baseline and
``check_ac_success=False`` use the executed action's name instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from text_crafter import SYNONYMS, same_action
from text_crafter.tasks import (  # re-exported: the chains are game data
    CUSTOM_TASK_CHAINS,
    CUSTOM_TASKS,
    SINGLE_TASKS,
    TASK_CHAINS,
)

__all__ = ["CUSTOM_TASKS", "CUSTOM_TASK_CHAINS", "SINGLE_TASKS", "SURVIVAL_REWARD", "TASK_CHAINS",
           "BatchReward", "GoalReward", "Reward", "SingleTaskReward", "StepReward"]


# ---------------------------------------------------------------------------- the reward seam
class Reward(Protocol):
    """A reward an agent learns from: ELLM's goal reward, a single task's, the game reward,
    RND, NovelD or APT. ``per_step`` says when it is computed, and so which of the two
    sub-protocols a plug-in implements:

    - :class:`StepReward` (``per_step`` True): at collection, one value per env step; the
      loop sums a run's per-step rewards into the replay's ``reward``, which reaches the learner
      as each sampled transition's n-step return (clipped as the config says);
    - :class:`BatchReward` (``per_step`` False): at update, from the sampled transitions; the
      agent adds its n-step return to the batch's ``reward`` before the TD step, then lets the
      plug-in learn from the batch.
    """

    name: str  # prefix of its metrics
    per_step: bool


class StepReward(Reward, Protocol):
    """A reward computed at collection (``per_step`` True)."""

    def reset(self) -> None:
        """A new episode starts."""

    def step(self, info: Mapping[str, Any], goals: Sequence[str]) -> float:
        """The reward of the step just taken (``info`` of the env step; ``goals``: those shown
        to the agent when it acted)."""


class BatchReward(Reward, Protocol):
    """A reward computed at update (``per_step`` False)."""

    def compute(self, batch: Any) -> tuple[Any, dict[str, float]]:
        """The n-step return of each sampled transition (a [B] tensor on the agent's device,
        no gradients) and metrics kept on the device (tensors) or plain floats."""

    def update(self, batch: Any) -> dict[str, float]:
        """Learn from the batch (e.g. one gradient step of a predictor); its losses."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class GoalReward:
    """Cosine reward between a transition caption and the previous step's goals."""

    def __init__(self, embedder: Embedder, threshold: float = 0.99):
        self.embedder = embedder
        self.threshold = threshold

    def __call__(self, caption: str, goals: Sequence[str]) -> tuple[float, str | None]:
        """(reward, matched goal or None)."""
        if not caption or not goals:
            return 0.0, None
        captions = [caption] + ([SYNONYMS[caption]] if caption in SYNONYMS else [])
        cap = self.embedder.embed(captions)
        emb = self.embedder.embed(list(goals))
        sims = (emb @ cap.T).max(axis=1)
        best = int(np.argmax(sims))
        score = float(sims[best])
        if score > self.threshold:
            return score, goals[best]
        return 0.0, None


SURVIVAL_REWARD = 0.05  # paid every step of "survival", whatever the agent does
# Neighbours that count for "plant row" and "make workshop": the original skipped the offsets
# with dx == dy (the cell itself and one diagonal), so the other diagonal counts.
_ROW_OFFSETS = tuple((dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx != dy)

HIERARCHICAL_MODES = (False, True, "reward_last")


class SingleTaskReward:
    """Reward 1 for effectively executing the task (or the current subtask of its chain); the
    custom tasks are paid as the original paid them (:meth:`_custom`)."""

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
