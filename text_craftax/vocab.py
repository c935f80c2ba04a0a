"""Text-Crafter's words for Craftax-Classic's blocks, mobs, items and actions.

Every name comes from :mod:`text_crafter`, so captions, goals, oracle rules, prompts and LM cache
keys are the same text in both games."""

from __future__ import annotations

from typing import Final

from craftax.craftax_classic.constants import Action, BlockType

from text_crafter.actions import GOOD_ACTIONS, HARDER_ACTIONS
from text_crafter.captions import INVENTORY_ITEMS, STATUS_WORDS

# What a caption can name in the view, in one fixed order (bit i of the "seen" feature). Sand
# and the player are never named, as in text_crafter; arrows are not kept as objects.
NAMES: Final = ("water", "grass", "stone", "path", "tree", "lava", "coal", "iron", "diamond",
                "crafting table", "furnace", "plant", "cow", "zombie", "skeleton")
NO_NAME: Final = -1
# Never named as the faced thing (text_crafter's untargeted materials).
UNTARGETED: Final = ("path", "lava")
MOBS: Final = ("zombie", "cow", "skeleton")

# Craftax block type -> index in NAMES (NO_NAME for sand, out of bounds, invalid, wood).
_BLOCK_NAME: Final = {
    BlockType.WATER: "water", BlockType.GRASS: "grass", BlockType.STONE: "stone",
    BlockType.PATH: "path", BlockType.TREE: "tree", BlockType.LAVA: "lava",
    BlockType.COAL: "coal", BlockType.IRON: "iron", BlockType.DIAMOND: "diamond",
    BlockType.CRAFTING_TABLE: "crafting table", BlockType.FURNACE: "furnace",
    BlockType.PLANT: "plant", BlockType.RIPE_PLANT: "plant",
}
BLOCK_NAME_INDEX: Final = tuple(
    NAMES.index(_BLOCK_NAME[b]) if b in _BLOCK_NAME else NO_NAME for b in BlockType)

ITEMS: Final = INVENTORY_ITEMS  # Craftax's Inventory fields carry the same names
STATUS: Final = tuple(STATUS_WORDS)  # health, food, drink, energy

# The 17 Craftax actions, each named as the Text-Crafter action it is ("do" depends on what is
# faced, so it has no name of its own).
ACTION_NAMES: Final = {
    Action.NOOP: "do nothing", Action.LEFT: "move left", Action.RIGHT: "move right",
    Action.UP: "move up", Action.DOWN: "move down", Action.DO: None, Action.SLEEP: "sleep",
    Action.PLACE_STONE: "place stone", Action.PLACE_TABLE: "place crafting table",
    Action.PLACE_FURNACE: "place furnace", Action.PLACE_PLANT: "place plant",
    Action.MAKE_WOOD_PICKAXE: "make wood pickaxe",
    Action.MAKE_STONE_PICKAXE: "make stone pickaxe",
    Action.MAKE_IRON_PICKAXE: "make iron pickaxe", Action.MAKE_WOOD_SWORD: "make wood sword",
    Action.MAKE_STONE_SWORD: "make stone sword", Action.MAKE_IRON_SWORD: "make iron sword",
}
NUM_ACTIONS: Final = len(Action)

# Transition phrases: Text-Crafter's named actions that do something, in its order; a
# transition's phrase is the index of one, or NO_PHRASE when the action had no effect.
PHRASES: Final = tuple(name for name in HARDER_ACTIONS if name in GOOD_ACTIONS)
NO_PHRASE: Final = -1

# "do" on each faced thing, as Text-Crafter names it.
DO_PHRASE: Final = {
    "tree": "chop tree", "stone": "mine stone", "coal": "mine coal", "iron": "mine iron",
    "diamond": "mine diamond", "water": "drink water", "grass": "chop grass",
    "plant": "eat plant", "cow": "attack cow", "zombie": "attack zombie",
    "skeleton": "attack skeleton",
}
