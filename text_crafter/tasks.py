"""Single tasks of Text-Crafter and their prerequisite chains, in the order the original's
``single_goal_hierarchical`` showed them: game data that :mod:`ellm.reward` and the LLF read."""

from __future__ import annotations

from typing import Final

from text_crafter.actions import GOOD_ACTIONS

_TABLE = ("chop tree", "chop tree", "place crafting table")
_WOOD_PICKAXE = (*_TABLE, "make wood pickaxe")
_STONE_PICKAXE = (*_WOOD_PICKAXE, "mine stone", "make stone pickaxe")
_IRON_TOOLS = (*_STONE_PICKAXE, "mine stone", "place furnace", "mine coal", "mine iron")

# Two trees before the table: one for the table (the v1 cost), one for the first tool.
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

# The original's custom single tasks and their chains.
CUSTOM_TASK_CHAINS: dict[str, tuple[str, ...]] = {
    "plant row": ("chop grass", "place plant", "chop grass", "plant grass"),
    "make workshop": ("chop tree", "place crafting table", "chop tree", "place crafting table"),
    "chop grass with wood pickaxe": (*_WOOD_PICKAXE, "chop grass with wood pickaxe"),
    "survival": ("survival",),
    "vegetarianism": ("drink water", "chop grass"),
    "deforestation": ("chop tree",) * 5,
    "work and sleep": ("chop tree", "sleep", "place crafting table"),
    "gardening": ("chop grass", "chop tree", "place plant"),
    "wilderness survival": ("sleep", "chop grass", "attack zombie"),
}
CUSTOM_TASKS: Final = tuple(CUSTOM_TASK_CHAINS)
TASK_CHAINS.update(CUSTOM_TASK_CHAINS)
SINGLE_TASKS: Final = (*GOOD_ACTIONS, *CUSTOM_TASKS)  # every task a single-task run may name


def task_chain(task: str) -> tuple[str, ...]:
    """The subtasks of ``task`` in order (the task alone when it has no chain)."""
    return TASK_CHAINS.get(task, (task,))
