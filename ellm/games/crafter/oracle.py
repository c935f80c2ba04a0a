"""The rule-based oracle: Crafter's goals whose prerequisites hold in a state (docs/lm.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ellm.games.crafter.state import TextState
from ellm.lm.base import ModelFreeSuggester, truncate


@dataclass(frozen=True)
class Rule:
    """When the oracle suggests ``goal``."""

    goal: str
    sees: tuple[str, ...] = ()
    hides: tuple[str, ...] = ()
    needs: tuple[tuple[str, int], ...] = ()
    status: str | None = None

    def holds(self, words: frozenset[str], counts: Mapping[str, int], status: str) -> bool:
        return (all(w in words for w in self.sees)
                and not any(w in words for w in self.hides)
                and all(counts.get(item, 0) >= n for item, n in self.needs)
                and (self.status is None or self.status in status))


_WOOD, _STONE = ("wood", 1), ("stone", 1)
_COAL, _IRON = ("coal", 1), ("iron", 1)

# The oracle's canonical goals in suggestion order; requirements follow upstream crafter's
# data.yaml, and "visible" means a word of the caption (the 9x7 local view).
ORACLE_RULES: Final = (
    Rule("eat plant", sees=("plant",)),
    Rule("attack zombie", sees=("zombie",)),
    Rule("attack skeleton", sees=("skeleton",)),
    Rule("attack cow", sees=("cow",)),
    Rule("chop tree", sees=("tree",)),
    Rule("mine stone", sees=("stone",), needs=(("wood_pickaxe", 1),)),
    Rule("mine coal", sees=("coal",), needs=(("wood_pickaxe", 1),)),
    Rule("mine iron", sees=("iron",), needs=(("stone_pickaxe", 1),)),
    Rule("mine diamond", sees=("diamond",), needs=(("iron_pickaxe", 1),)),
    Rule("drink water", sees=("water",)),
    Rule("chop grass", sees=("grass",)),
    Rule("sleep", status="sleepy"),
    Rule("place stone", needs=(_STONE,)),
    Rule("place crafting table", hides=("table",), needs=(("wood", 2),)),
    Rule("place furnace", sees=("table",), needs=(("stone", 4),)),
    Rule("place plant", sees=("grass",), needs=(("sapling", 1),)),
    Rule("make wood pickaxe", sees=("table",), needs=(_WOOD,)),
    Rule("make stone pickaxe", sees=("table",), needs=(_WOOD, _STONE)),
    Rule("make iron pickaxe", sees=("table", "furnace"), needs=(_WOOD, _COAL, _IRON)),
    Rule("make wood sword", sees=("table",), needs=(_WOOD,)),
    Rule("make stone sword", sees=("table",), needs=(_WOOD, _STONE)),
    Rule("make iron sword", sees=("table", "furnace"), needs=(_WOOD, _COAL, _IRON)),
)
ORACLE_GOALS: Final = tuple(rule.goal for rule in ORACLE_RULES)

# The paper setting's oracle (FIDELITY.md row 2): goal -> (inventory needs, caption words).
PAPER_PREREQS: Final = {
    "eat plant": ({}, ("plant",)),
    "attack zombie": ({}, ("zombie",)),
    "attack skeleton": ({}, ("skeleton",)),
    "attack cow": ({}, ("cow",)),
    "eat cow": ({}, ("cow",)),
    "chop tree": ({}, ("tree",)),
    "mine stone": ({"wood_pickaxe": 1}, ("stone",)),
    "mine coal": ({"wood_pickaxe": 1}, ("coal",)),
    "mine iron": ({"stone_pickaxe": 1}, ("iron",)),
    "mine diamond": ({"iron_pickaxe": 1}, ("diamond",)),
    "drink water": ({}, ("water",)),
    "chop grass": ({}, ("grass",)),
    "sleep": ({}, ()),
    "place stone": ({"stone": 1}, ()),
    "place crafting table": ({"wood": 1}, ()),
    "make crafting table": ({"wood": 1}, ()),
    "place furnace": ({"stone": 4}, ()),
    "place plant": ({"sapling": 1}, ()),
    "make wood pickaxe": ({"wood": 1}, ("table",)),
    "make stone pickaxe": ({"stone": 1, "wood": 1}, ("table",)),
    "make iron pickaxe": ({"wood": 1, "coal": 1, "iron": 1}, ("table", "furnace")),
    "make wood sword": ({"wood": 1}, ("table",)),
    "make stone sword": ({"wood": 1, "stone": 1}, ("table",)),
    "make iron sword": ({"wood": 1, "coal": 1, "iron": 1}, ("table", "furnace")),
}


def paper_oracle_goals(state: TextState) -> list[str]:
    """The original oracle's goals, its quirks kept: "drink water" follows "thirsty" in the
    inventory sentence, so it never appears.
    """
    caption = state.caption.lower()
    goals = [goal for goal, (needs, sees) in PAPER_PREREQS.items()
             if all(word in caption for word in sees)
             and all(state.inventory_counts.get(item, 0) >= n for item, n in needs.items())]
    if "sleepy" not in state.status.lower():
        goals.remove("sleep")
    if "crafting table" in caption and "place crafting table" in goals:
        goals.remove("place crafting table")
    if "thirsty" in state.inventory.lower() and "drink water" not in goals:
        goals.append("drink water")
    return goals


def caption_words(caption: str) -> frozenset[str]:
    """Lower-case words of a caption ("crafting table" -> {"crafting", "table"})."""
    return frozenset(re.findall(r"[a-z]+", caption.lower()))


class SimpleOracle(ModelFreeSuggester):
    """Rule-based goals from the caption and the true inventory: the original's rules with
    ``paper_setting``, else only what the upstream rules let the player do."""

    def __init__(self, *, paper_setting: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.paper_setting = paper_setting

    def suggest(self, state: TextState) -> list[str]:
        self.counters.queries += 1
        if self.paper_setting:
            goals = paper_oracle_goals(state)
        else:
            words = caption_words(state.caption)
            goals = [rule.goal for rule in ORACLE_RULES
                     if rule.holds(words, state.inventory_counts, state.status.lower())]
        return truncate(self.novelty.keep(goals), self.max_num_goals)
