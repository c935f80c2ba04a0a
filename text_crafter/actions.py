"""Action spaces of Text-Crafter (ELLM.md §2.1, plus Crafter's own) and their mapping onto
upstream Crafter actions; a verb-noun pair outside :data:`GOOD_ACTIONS` runs as a no-op."""

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

DO: Final = "do"
CRAFTER_ACTIONS: Final = (
    "do nothing", "move left", "move right", "move up", "move down", DO, "sleep",
    "place stone", "place crafting table", "place furnace", "place plant",
    "make wood pickaxe", "make stone pickaxe", "make iron pickaxe",
    "make wood sword", "make stone sword", "make iron sword",
)

ACTION_SPACES: Final = {
    "harder": HARDER_ACTIONS, "easier": EASIER_ACTIONS, "crafter": CRAFTER_ACTIONS}

# Crafter's "do" is named as the good action on what it faces, so captions and rewards match.
DO_NAMES: Final = {
    "plant": "eat plant", "zombie": "attack zombie", "skeleton": "attack skeleton",
    "cow": "attack cow", "tree": "chop tree", "stone": "mine stone", "coal": "mine coal",
    "iron": "mine iron", "diamond": "mine diamond", "water": "drink water",
    "grass": "chop grass",
}

# (upstream action, the faced thing a "do" needs or None)
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
    DO: ("do", None),  # the crafter space's do facing nothing it acts on
}


def action_names(action_space_type: str) -> tuple[str, ...]:
    """Names of all action ids of a space, in id order."""
    try:
        return ACTION_SPACES[action_space_type]
    except KeyError:
        raise ValueError(
            f"unknown action_space_type {action_space_type!r}; expected one of "
            f"{sorted(ACTION_SPACES)}") from None


def executed_name(name: str, target: str | None) -> str:
    """The name an action carries out facing ``target``: Crafter's "do" becomes "chop tree"."""
    return DO_NAMES.get(target or "", DO) if name == DO else name


def reported_names(action_space_type: str) -> tuple[str, ...]:
    """Every name an env of this space reports as executed, "do"'s names after it."""
    names = action_names(action_space_type)
    if DO not in names:
        return names
    at = names.index(DO) + 1
    return names[:at] + tuple(DO_NAMES.values()) + names[at:]


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
    """The noun of an action name ("chop tree" -> "tree"; verb-only actions and "do" -> None)."""
    if name in VERB_ONLY or name == DO:
        return None
    return name.split(" ", 1)[1]
