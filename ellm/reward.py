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
  (:data:`TASK_CHAINS`); ``True`` pays every subtask, ``"reward_last"`` only the task itself.

The success gate (v1: plausible, v2: effective success) is applied by the environment, which
only writes a transition caption when the gate passes; the Novelty baseline and
``check_ac_success=False`` use the executed action's name instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from text_crafter import SYNONYMS, same_action


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


# Prerequisite chains for single-task finetuning with single_goal_hierarchical (ELLM.md §4).
_TABLE = ("chop tree", "chop tree", "place crafting table")
_WOOD_PICKAXE = (*_TABLE, "make wood pickaxe")
_STONE_PICKAXE = (*_WOOD_PICKAXE, "mine stone", "make stone pickaxe")
_IRON_TOOLS = (*_STONE_PICKAXE, "mine stone", "place furnace", "mine coal", "mine iron")

# The subtasks shown one after the other with single_goal_hierarchical, as the original has
# them (a goal missing here is its own chain). Two trees before the table: one for the table
# (the v1 cost), one for the first tool.
TASK_CHAINS: dict[str, tuple[str, ...]] = {
    "eat plant": ("chop grass", "place plant", "eat plant"),
    "place plant": ("chop grass", "place plant"),
    "place crafting table": ("chop tree", "place crafting table"),
    "make wood pickaxe": _WOOD_PICKAXE,
    "make wood sword": (*_TABLE, "make wood sword"),
    "mine stone": (*_WOOD_PICKAXE, "mine stone"),
    "mine coal": (*_WOOD_PICKAXE, "mine coal"),
    "place stone": (*_WOOD_PICKAXE, "mine stone", "place stone"),
    "place furnace": (*_WOOD_PICKAXE, "mine stone", "mine stone", "mine stone", "mine stone",
                      "place furnace"),
    "make stone pickaxe": _STONE_PICKAXE,
    "make stone sword": (*_WOOD_PICKAXE, "mine stone", "make stone sword"),
    "mine iron": (*_STONE_PICKAXE, "mine iron"),
    "make iron pickaxe": (*_IRON_TOOLS, "make iron pickaxe"),
    "make iron sword": (*_IRON_TOOLS, "make iron sword"),
    "mine diamond": (*_IRON_TOOLS, "make iron pickaxe", "mine diamond"),
}

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
        self._index = 0

    def reset(self) -> None:
        self._index = 0

    @property
    def goal(self) -> str:
        """The goal shown to the agent now."""
        return self.chain[min(self._index, len(self.chain) - 1)]

    def __call__(self, action_name: str, effective: bool) -> float:
        if not effective or not same_action(action_name, self.goal):
            return 0.0
        is_last = self._index >= len(self.chain) - 1
        self._index += 1
        if self.hierarchical == "reward_last" and not is_last:
            return 0.0
        return 1.0
