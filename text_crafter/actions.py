"""Action spaces of Text-Crafter and their mapping onto upstream Crafter actions.

Two spaces (ELLM.md §2.1):

- ``harder`` (default, 139 ids): 6 verb-only actions, then 7 verbs x 19 nouns with
  ``id = 6 + verb_index * 19 + noun_index`` (``verb_index`` counts from "mine").
  Only the pairs listed in :data:`GOOD_ACTIONS` do something in the game; every other pair
  (e.g. "drink cow") is a valid id that executes as a no-op and is reported as failed.
- ``easier`` (27 ids): the named useful actions only.

"Good" actions (29) = the 27 easier actions + "eat cow" + "make crafting table", which are
synonyms of "attack cow" and "place crafting table".
"""

from __future__ import annotations

from typing import Final

VERB_ONLY: Final = ("do nothing", "move left", "move right", "move up", "move down", "sleep")
VERBS: Final = ("mine", "eat", "attack", "chop", "drink", "place", "make")
NOUNS: Final = (
    "zombie", "skeleton", "cow", "tree", "stone", "coal", "iron", "diamond", "water", "grass",
    "crafting table", "furnace", "plant", "wood pickaxe", "stone pickaxe", "iron pickaxe",
    "wood sword", "stone sword", "iron sword",
)

HARDER_ACTIONS: Final = VERB_ONLY + tuple(f"{verb} {noun}" for verb in VERBS for noun in NOUNS)

EASIER_ACTIONS: Final = (
    "do nothing", "move left", "move right", "move up", "move down",
    "eat plant", "attack zombie", "attack skeleton", "attack cow", "chop tree",
    "mine stone", "mine coal", "mine iron", "mine diamond", "drink water", "chop grass",
    "sleep", "place stone", "place crafting table", "place furnace", "place plant",
    "make wood pickaxe", "make stone pickaxe", "make iron pickaxe",
    "make wood sword", "make stone sword", "make iron sword",
)

GOOD_ACTIONS: Final = EASIER_ACTIONS + ("eat cow", "make crafting table")

# Each synonym pair names one game action (ELLM.md §2.1).
SYNONYMS: Final = {
    "eat cow": "attack cow",
    "attack cow": "eat cow",
    "make crafting table": "place crafting table",
    "place crafting table": "make crafting table",
}

ACTION_SPACES: Final = {"harder": HARDER_ACTIONS, "easier": EASIER_ACTIONS}

# What each good action asks of the upstream engine: (upstream action, required target).
# The target is the faced object/material name that must be present for "do" actions;
# None for actions that do not depend on what is faced.
UPSTREAM: Final = {
    "do nothing": ("noop", None),
    "move left": ("move_left", None),
    "move right": ("move_right", None),
    "move up": ("move_up", None),
    "move down": ("move_down", None),
    "sleep": ("sleep", None),
    "eat plant": ("do", "plant"),
    "attack zombie": ("do", "zombie"),
    "attack skeleton": ("do", "skeleton"),
    "attack cow": ("do", "cow"),
    "eat cow": ("do", "cow"),
    "chop tree": ("do", "tree"),
    "mine stone": ("do", "stone"),
    "mine coal": ("do", "coal"),
    "mine iron": ("do", "iron"),
    "mine diamond": ("do", "diamond"),
    "drink water": ("do", "water"),
    "chop grass": ("do", "grass"),
    "place stone": ("place_stone", None),
    "place crafting table": ("place_table", None),
    "make crafting table": ("place_table", None),
    "place furnace": ("place_furnace", None),
    "place plant": ("place_plant", None),
    "make wood pickaxe": ("make_wood_pickaxe", None),
    "make stone pickaxe": ("make_stone_pickaxe", None),
    "make iron pickaxe": ("make_iron_pickaxe", None),
    "make wood sword": ("make_wood_sword", None),
    "make stone sword": ("make_stone_sword", None),
    "make iron sword": ("make_iron_sword", None),
}


def action_names(action_space_type: str) -> tuple[str, ...]:
    """Names of all action ids of a space, in id order."""
    try:
        return ACTION_SPACES[action_space_type]
    except KeyError:
        raise ValueError(
            f"unknown action_space_type {action_space_type!r}; expected one of "
            f"{sorted(ACTION_SPACES)}") from None


def harder_id(verb: str, noun: str | None = None) -> int:
    """Flat id of a harder-space action: verb-only actions by name, else 6 + v * 19 + n."""
    if noun is None:
        return VERB_ONLY.index(verb)
    return len(VERB_ONLY) + VERBS.index(verb) * len(NOUNS) + NOUNS.index(noun)


def split_harder_id(action: int) -> tuple[str, str | None]:
    """Inverse of :func:`harder_id`: (verb, noun or None)."""
    if not 0 <= action < len(HARDER_ACTIONS):
        raise ValueError(f"action {action} out of range [0, {len(HARDER_ACTIONS)})")
    if action < len(VERB_ONLY):
        return VERB_ONLY[action], None
    verb_index, noun_index = divmod(action - len(VERB_ONLY), len(NOUNS))
    return VERBS[verb_index], NOUNS[noun_index]


def same_action(a: str, b: str) -> bool:
    """True when two action names are equal or synonyms ("eat cow" == "attack cow")."""
    return a == b or SYNONYMS.get(a) == b


def action_noun(name: str) -> str | None:
    """The noun of an action name ("chop tree" -> "tree"; verb-only actions -> None)."""
    if name in VERB_ONLY:
        return None
    return name.split(" ", 1)[1]
