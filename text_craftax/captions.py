"""Captions of Craftax-Classic states and transitions as integer features computed inside JAX
(ELLM.md §2.3); :func:`describe` writes them as text_crafter's sentences, outside compiled code."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from craftax.craftax_classic.constants import DIRECTIONS, OBS_DIM, Action, BlockType

from text_craftax.vocab import (
    ACTION_NAMES,
    BLOCK_NAME_INDEX,
    DO_PHRASE,
    ITEMS,
    MOBS,
    NAMES,
    NO_NAME,
    NO_PHRASE,
    PHRASES,
    STATUS,
    UNTARGETED,
)
from text_crafter import captions as text

FULL = text.STATUS_FULL
_BLOCK_NAMES = jnp.array(BLOCK_NAME_INDEX, dtype=jnp.int32)
_TARGETABLE = jnp.array([name not in UNTARGETED for name in NAMES])
_MOB_NAMES = {mob: NAMES.index(mob) for mob in MOBS}
_HALF = jnp.array(OBS_DIM, dtype=jnp.int32) // 2


class Caption(NamedTuple):
    """A state's caption as features (one state; batched by ``vmap``)."""

    seen: jax.Array
    target: jax.Array
    items: jax.Array
    needs: jax.Array


def _view_names(state) -> jax.Array:
    """Name index of each cell of the view: a mob hides its cell's block, as an object hides its
    material in Crafter; arrows hide it and are not named."""
    pad = max(OBS_DIM)
    grid = jnp.pad(state.map, pad, constant_values=BlockType.OUT_OF_BOUNDS.value)
    corner = state.player_position - _HALF + pad
    names = _BLOCK_NAMES[jax.lax.dynamic_slice(grid, corner, OBS_DIM)]
    for mobs, name in ((state.zombies, _MOB_NAMES["zombie"]), (state.cows, _MOB_NAMES["cow"]),
                       (state.skeletons, _MOB_NAMES["skeleton"]), (state.arrows, NO_NAME)):
        local = mobs.position - state.player_position + _HALF
        inside = mobs.mask & jnp.all((local >= 0) & (local < jnp.array(OBS_DIM)), axis=-1)
        # Cells outside the view are dropped rather than clipped onto its edge.
        rows = jnp.where(inside, local[:, 0], OBS_DIM[0])
        names = names.at[rows, local[:, 1]].set(name, mode="drop")
    return names


def _mob_at(state, cell: jax.Array) -> jax.Array:
    found = jnp.int32(NO_NAME)
    for mobs, mob in ((state.zombies, "zombie"), (state.cows, "cow"),
                      (state.skeletons, "skeleton")):
        here = jnp.any(mobs.mask & jnp.all(mobs.position == cell, axis=-1))
        found = jnp.where(here, _MOB_NAMES[mob], found)
    return found


def faced_cell(state) -> jax.Array:
    return state.player_position + DIRECTIONS[state.player_direction]


def target_of(state) -> jax.Array:
    cell = faced_cell(state)
    inside = jnp.all((cell >= 0) & (cell < jnp.array(state.map.shape)))
    block = state.map[jnp.clip(cell[0], 0, state.map.shape[0] - 1),
                      jnp.clip(cell[1], 0, state.map.shape[1] - 1)]
    name = jnp.where(inside, _BLOCK_NAMES[block], NO_NAME)
    name = jnp.where((name >= 0) & _TARGETABLE[jnp.maximum(name, 0)], name, NO_NAME)
    mob = _mob_at(state, cell)
    return jnp.where(mob >= 0, mob, name)


def inventory_counts(state) -> jax.Array:
    return jnp.stack([getattr(state.inventory, item) for item in ITEMS]).astype(jnp.int32)


def caption(state) -> Caption:
    names = _view_names(state).reshape(-1)
    seen = jnp.zeros(len(NAMES) + 1, dtype=bool).at[names].set(True, mode="drop")[:len(NAMES)]
    levels = jnp.stack([state.player_health, state.player_food, state.player_drink,
                        state.player_energy])
    return Caption(seen=seen, target=target_of(state), items=inventory_counts(state),
                   needs=levels < FULL)


def _phrase(name: str | None) -> int:
    return NO_PHRASE if name is None else PHRASES.index(name)


# Where "do" grows no item (-1), its effect is judged from what was faced alone.
_DO_PHRASE = jnp.array([_phrase(DO_PHRASE.get(name)) for name in NAMES], dtype=jnp.int32)
_DO_ITEM = jnp.array([ITEMS.index(item) if (item := {
    "tree": "wood", "stone": "stone", "coal": "coal", "iron": "iron", "diamond": "diamond",
    "grass": "sapling"}.get(name)) else -1 for name in NAMES], dtype=jnp.int32)
_ACTION_PHRASE = jnp.array([_phrase(ACTION_NAMES[a]) for a in Action], dtype=jnp.int32)
# What an action's effect shows in: the item it makes, or the item it spends in placing.
_MADE = {Action.MAKE_WOOD_PICKAXE: "wood_pickaxe", Action.MAKE_STONE_PICKAXE: "stone_pickaxe",
         Action.MAKE_IRON_PICKAXE: "iron_pickaxe", Action.MAKE_WOOD_SWORD: "wood_sword",
         Action.MAKE_STONE_SWORD: "stone_sword", Action.MAKE_IRON_SWORD: "iron_sword"}
_SPENT = {Action.PLACE_STONE: "stone", Action.PLACE_TABLE: "wood",
          Action.PLACE_FURNACE: "stone", Action.PLACE_PLANT: "sapling"}
_GROWS = jnp.array([ITEMS.index(_MADE[a]) if a in _MADE else -1 for a in Action], jnp.int32)
_SHRINKS = jnp.array([ITEMS.index(_SPENT[a]) if a in _SPENT else -1 for a in Action], jnp.int32)
_MOVES = jnp.array([a in (Action.LEFT, Action.RIGHT, Action.UP, Action.DOWN) for a in Action])


def transition_phrase(before, action: jax.Array, after) -> jax.Array:
    """The action's phrase if it had its real effect (ELLM.md §2.2), else NO_PHRASE."""
    held, now = inventory_counts(before), inventory_counts(after)
    delta = now - held
    awake = ~before.is_sleeping  # Craftax turns a sleeping player's action into a no-op
    target = target_of(before)
    # "do" on a mob, water or a ripe plant always works; on a block, only if its item grows.
    item = _DO_ITEM[jnp.maximum(target, 0)]
    ripe = before.map[tuple(jnp.clip(faced_cell(before), 0, before.map.shape[0] - 1))] \
        == BlockType.RIPE_PLANT.value
    plant = target == NAMES.index("plant")
    did = jnp.where(item >= 0, delta[jnp.maximum(item, 0)] > 0, jnp.where(plant, ripe, True))
    do_phrase = jnp.where((target >= 0) & awake & did, _DO_PHRASE[jnp.maximum(target, 0)],
                          NO_PHRASE)
    grows, shrinks = _GROWS[action], _SHRINKS[action]
    effective = jnp.select(
        [action == Action.NOOP.value, _MOVES[action], action == Action.SLEEP.value,
         grows >= 0, shrinks >= 0],
        [True, jnp.any(after.player_position != before.player_position), after.is_sleeping,
         delta[jnp.maximum(grows, 0)] > 0, delta[jnp.maximum(shrinks, 0)] < 0],
        False)
    other = jnp.where(effective, _ACTION_PHRASE[action], NO_PHRASE)
    return jnp.where(action == Action.DO.value, do_phrase, other).astype(jnp.int32)


def describe(features: Caption, version: int = 2) -> dict[str, str]:
    """One state's sentences as text_crafter writes them (``version`` 1: the original's quirks)."""
    seen = np.asarray(features.seen)
    names = sorted(NAMES[i] for i in np.flatnonzero(seen))
    target = int(features.target)
    faced = None if target == NO_NAME else NAMES[target]
    if faced == "crafting table" and version == 1:
        faced = "table"
    counts = dict(zip(ITEMS, (int(c) for c in np.asarray(features.items)), strict=True))
    levels = {stat: (0 if need else FULL)
              for stat, need in zip(STATUS, np.asarray(features.needs), strict=True)}
    caption_text = text.caption_of(names, faced, version)
    inventory = text.inventory_sentence(counts, version)
    status = text.status_sentence(levels)
    return {"caption": caption_text, "inventory": inventory, "status": status,
            "text_obs": text.text_observation(caption_text, inventory, status)}


def phrase_text(phrase: int) -> str:
    return "" if phrase == NO_PHRASE else PHRASES[phrase]
