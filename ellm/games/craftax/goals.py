"""Goals inside the compiled loop as masks over a finite vocabulary (ELLM.md §3): the oracle's
rules from caption features, and the LLM's answers in a table keyed by the caption."""

from __future__ import annotations

from typing import Final, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ellm.games.craftax.game import (
    GOOD_ACTIONS,
    HARDER_ACTIONS,
    ITEMS,
    NAMES,
    SYNONYMS,
    Caption,
)
from ellm.games.crafter.oracle import ORACLE_RULES, PAPER_PREREQS
from ellm.lm.base import normalise_goal

_NOT_GOALS = ("do nothing", "move left", "move right", "move up", "move down")
# The goals an LM answer may name: Text-Crafter's goal vocabulary (harder action space).
GOALS: Final = tuple(n for n in HARDER_ACTIONS if n in GOOD_ACTIONS and n not in _NOT_GOALS)
# Caption words the oracle reads, as the names they stand for.
_WORD_NAME: Final = {"table": "crafting table"}


class RuleArrays(NamedTuple):
    """An oracle's rules over GOALS as arrays (one row per goal)."""

    known: np.ndarray
    sees: np.ndarray   # bool[G, NAMES]: all in view
    hides: np.ndarray  # bool[G, NAMES]: none in view
    needs: np.ndarray  # int[G, ITEMS]: at least this many held
    sleepy: np.ndarray


def _names(words) -> list[int]:
    return [NAMES.index(_WORD_NAME.get(w, w)) for w in words]


def rule_arrays(paper_setting: bool) -> RuleArrays:
    """The paper setting's oracle (FIDELITY.md row 2) or the fixed one, as arrays."""
    g, n, i = len(GOALS), len(NAMES), len(ITEMS)
    arrays = RuleArrays(np.zeros(g, bool), np.zeros((g, n), bool), np.zeros((g, n), bool),
                        np.zeros((g, i), np.int32), np.zeros(g, bool))
    rules = ({goal: (needs, sees, (), None) for goal, (needs, sees) in PAPER_PREREQS.items()}
             if paper_setting else
             {r.goal: (dict(r.needs), r.sees, r.hides, r.status) for r in ORACLE_RULES})
    if paper_setting:  # its two special cases: sleep when sleepy, no second table in view
        rules["sleep"] = ({}, (), (), "sleepy")
        needs, sees, _, _ = rules["place crafting table"]
        rules["place crafting table"] = (needs, sees, ("table",), None)
    for goal, (needs, sees, hides, status) in rules.items():
        row = GOALS.index(goal)
        arrays.known[row] = True
        arrays.sees[row, _names(sees)] = True
        arrays.hides[row, _names(hides)] = True
        for item, count in needs.items():
            arrays.needs[row, ITEMS.index(item)] = count
        arrays.sleepy[row] = status == "sleepy"
    return arrays


def oracle_mask(rules: RuleArrays, cap: Caption) -> jax.Array:
    """bool[G]: the goals the oracle suggests for one state's caption."""
    seen = cap.seen
    sees = jnp.all(~jnp.asarray(rules.sees) | seen, axis=-1)
    hides = ~jnp.any(jnp.asarray(rules.hides) & seen, axis=-1)
    needs = jnp.all(cap.items >= jnp.asarray(rules.needs), axis=-1)
    sleepy = ~jnp.asarray(rules.sleepy) | cap.needs[3]
    return jnp.asarray(rules.known) & sees & hides & needs & sleepy


# Achieving a goal also retires its synonym ("attack cow" and "eat cow").
_SYNONYM_OF: Final = np.array([GOALS.index(SYNONYMS[g]) if g in SYNONYMS else i
                               for i, g in enumerate(GOALS)], np.int32)


def retire(achieved: jax.Array, goal: jax.Array, hit: jax.Array) -> jax.Array:
    """``achieved`` (bool[G]) with ``goal`` and its synonym marked when ``hit``."""
    marks = jnp.zeros_like(achieved).at[goal].set(hit).at[jnp.asarray(_SYNONYM_OF)[goal]].max(hit)
    return achieved | marks


def goal_indices(goals, synonyms_ok: bool = True) -> tuple[list[int], int]:
    """Vocabulary indices of an answer's goals, and how many it named outside the vocabulary."""
    found, outside = [], 0
    for goal in goals:
        name = normalise_goal(goal)
        if name in GOALS:
            found.append(GOALS.index(name))
        else:
            outside += 1
    return sorted(set(found)), outside


# ---- the LLM's goal table ---------------------------------------------------------------------

PROBES: Final = 8


def caption_key(cap: Caption) -> jax.Array:
    """int32[2]: all an LM prompt of the state reads (names, faced thing, items held, needs)."""
    bits = lambda flags: jnp.sum(flags.astype(jnp.int32) << jnp.arange(flags.shape[-1]), -1)
    word0 = bits(cap.seen) | ((cap.target + 1) << len(NAMES))
    word1 = bits(cap.items > 0) | (bits(cap.needs) << len(ITEMS))
    return jnp.stack([word0, word1], axis=-1).astype(jnp.int32)


_MIX: Final = (2654435761, 40503)


def _slot(key, size: int):
    mixed = key[..., 0].astype(jnp.uint32) * jnp.uint32(_MIX[0]) \
        + key[..., 1].astype(jnp.uint32) * jnp.uint32(_MIX[1])
    return (mixed >> jnp.uint32(7)).astype(jnp.int32) & (size - 1)


def _host_slot(key: np.ndarray, size: int) -> int:
    word0, word1 = (int(w) & 0xFFFFFFFF for w in key)
    return (((word0 * _MIX[0] + word1 * _MIX[1]) & 0xFFFFFFFF) >> 7) & (size - 1)


class TableArrays(NamedTuple):
    keys: jax.Array    # int32[C, 2], -1 where empty
    masks: jax.Array   # bool[C, G]


def lookup(table: TableArrays, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(found, bool[G] goals) of one caption key."""
    size = table.keys.shape[0]
    slots = (_slot(key, size) + jnp.arange(PROBES)) & (size - 1)
    hits = jnp.all(table.keys[slots] == key, axis=-1)
    found = jnp.any(hits)
    return found, jnp.where(found, table.masks[slots[jnp.argmax(hits)]], False)


class GoalTable:
    """The host's goal table: the LM's answers by caption key, open addressing."""

    def __init__(self, size: int) -> None:
        if size & (size - 1) or size < PROBES:
            raise ValueError(f"goal table size must be a power of two >= {PROBES}, got {size}")
        self.keys = np.full((size, 2), -1, np.int32)
        self.masks = np.zeros((size, len(GOALS)), bool)
        self.entries = 0
        self.full_misses = 0  # answers that found no free slot within PROBES

    def __contains__(self, key: tuple[int, int]) -> bool:
        return self._find(np.asarray(key, np.int32)) is not None

    def _find(self, key: np.ndarray) -> int | None:
        size = len(self.keys)
        start = _host_slot(key, size)
        for probe in range(PROBES):
            slot = (start + probe) & (size - 1)
            if (self.keys[slot] == key).all():
                return slot
        return None

    def put(self, key: tuple[int, int], goals: list[int]) -> bool:
        """False when the key's probe window is full."""
        key_arr = np.asarray(key, np.int32)
        size = len(self.keys)
        start = _host_slot(key_arr, size)
        for probe in range(PROBES):
            slot = (start + probe) & (size - 1)
            if (self.keys[slot] == -1).all() or (self.keys[slot] == key_arr).all():
                self.entries += int((self.keys[slot] == -1).all())
                self.keys[slot] = key_arr
                self.masks[slot] = False
                self.masks[slot, goals] = True
                return True
        self.full_misses += 1
        return False

    def arrays(self) -> TableArrays:
        return TableArrays(jnp.asarray(self.keys), jnp.asarray(self.masks))

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"keys": self.keys.copy(), "masks": self.masks.copy()}

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        if arrays["keys"].shape != self.keys.shape or arrays["masks"].shape != self.masks.shape:
            raise ValueError("the snapshot's goal table has another size than craftax.goal_table_size")
        self.keys, self.masks = arrays["keys"].astype(np.int32), arrays["masks"].astype(bool)
        self.entries = int((self.keys != -1).any(axis=1).sum())


def key_features(key: np.ndarray) -> Caption:
    """The caption features a key stands for (item counts as 1 where held)."""
    word0, word1 = int(key[0]), int(key[1])
    seen = np.array([(word0 >> i) & 1 for i in range(len(NAMES))], bool)
    target = (word0 >> len(NAMES)) - 1
    items = np.array([(word1 >> i) & 1 for i in range(len(ITEMS))], np.int32)
    needs = np.array([(word1 >> (len(ITEMS) + i)) & 1 for i in range(4)], bool)
    return Caption(seen=seen, target=np.int32(target), items=items, needs=needs)
