"""Suggesters that need no language model: the rule-based oracle and the Novelty baseline."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ellm.lm.base import NoveltyFilter, TextState, truncate
from lmclient.counters import LMCounters


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


class _RuleFreeSuggester:
    """Shared episode bookkeeping of the suggesters that call no model."""

    uses_success_gate: bool = True

    def __init__(self, *, novelty_bonus: bool = True, max_num_goals: int | None = None,
                 synonyms: Mapping[str, str] | None = None) -> None:
        self.novelty = NoveltyFilter(novelty_bonus, synonyms)
        self.max_num_goals = max_num_goals
        self.counters = LMCounters()

    def reset(self) -> None:
        self.novelty.reset()

    def mark_achieved(self, goal: str) -> None:
        self.novelty.mark(goal)

    def metrics(self) -> dict[str, float]:
        return {**self.counters.as_metrics(), "budget_spent": 0.0, "budget_exhausted": 0.0}

    def close(self) -> None:
        """Nothing to release: no model is asked."""


class SimpleOracle(_RuleFreeSuggester):
    """Rule-based goals from the caption and the true inventory.

    ``paper_setting``: the original's rules; otherwise only what the upstream rules let the
    player do.
    """

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


class BaselineModel(_RuleFreeSuggester):
    """The Novelty baseline: every goal of ``all_goals`` not achieved yet this episode."""

    uses_success_gate = False

    def __init__(self, all_goals: Sequence[str], *, novelty_bonus: bool = True,
                 max_num_goals: int | None = None,
                 synonyms: Mapping[str, str] | None = None) -> None:
        super().__init__(novelty_bonus=novelty_bonus, max_num_goals=max_num_goals,
                         synonyms=synonyms)
        if not all_goals:
            raise ValueError("BaselineModel needs a non-empty all_goals list")
        self.all_goals = tuple(dict.fromkeys(all_goals))

    def suggest(self, state: TextState) -> list[str]:
        self.counters.queries += 1
        return truncate(self.novelty.keep(self.all_goals), self.max_num_goals)
