"""Text-Crafter's words for Craftax's things and actions, so both games' text and LM cache agree."""

from __future__ import annotations

from typing import Final

from craftax.craftax_classic.constants import Action, BlockType

from text_crafter.actions import GOOD_ACTIONS, HARDER_ACTIONS
from text_crafter.captions import INVENTORY_ITEMS, STATUS_WORDS

# Sand and the player are never named, as in text_crafter; arrows are not kept as objects.
NAMES: Final = ("water", "grass", "stone", "path", "tree", "lava", "coal", "iron", "diamond",
                "crafting table", "furnace", "plant", "cow", "zombie", "skeleton")
NO_NAME: Final = -1
# Never named as the faced thing (text_crafter's untargeted materials).
UNTARGETED: Final = ("path", "lava")
MOBS: Final = ("zombie", "cow", "skeleton")

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
STATUS: Final = tuple(STATUS_WORDS)

# "do" has no name of its own: it depends on what is faced.
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

PHRASES: Final = tuple(name for name in HARDER_ACTIONS if name in GOOD_ACTIONS)
NO_PHRASE: Final = -1

DO_PHRASE: Final = {
    "tree": "chop tree", "stone": "mine stone", "coal": "mine coal", "iron": "mine iron",
    "diamond": "mine diamond", "water": "drink water", "grass": "chop grass",
    "plant": "eat plant", "cow": "attack cow", "zombie": "attack zombie",
    "skeleton": "attack skeleton",
}
