"""Text descriptions of a Crafter state (ELLM.md §2.3): ``version=1`` keeps the original's
wording byte for byte ("You see grass, and tree.", "You see ."), ``version=2`` is plain English."""

from __future__ import annotations

from typing import Any

import numpy as np

INVENTORY_ITEMS = (
    "sapling", "wood", "stone", "coal", "iron", "diamond", "wood_pickaxe", "stone_pickaxe",
    "iron_pickaxe", "wood_sword", "stone_sword", "iron_sword",
)
STATUS_WORDS = {"health": "hurt", "food": "hungry", "drink": "thirsty", "energy": "sleepy"}
STATUS_FULL = 9

_HIDDEN_IN_VIEW = frozenset({"player", "sand", "arrow"})
_UNTARGETED_MATERIALS = frozenset({"path", "sand", "lava"})


def object_name(obj: Any) -> str:
    """Caption name of a Crafter object ("cow", "zombie", "plant", ...)."""
    for cls in type(obj).__mro__:  # the upstream class, also for subclasses such as V1Player
        if cls.__module__ == "crafter.objects":
            return cls.__name__.lower()
    return type(obj).__name__.lower()


def material_name(material: str, version: int = 2) -> str:
    """Caption name of a material: "table" becomes "crafting table"."""
    return "crafting table" if material == "table" else material


def join_names(names: list[str], version: int) -> str:
    if version == 1:
        if len(names) <= 1:
            return "".join(names)
        return ", ".join(names[:-1]) + ", and " + names[-1]
    if not names:
        return "nothing"
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return ", ".join(names[:-1]) + ", and " + names[-1]


def visible_names(world: Any, center: np.ndarray, grid: tuple[int, int]) -> list[str]:
    """Sorted distinct names of what the local view shows (objects hide their cell's material)."""
    (cx, cy), (gw, gh) = center, grid
    x0, y0 = cx - gw // 2, cy - gh // 2
    xa, ya = max(x0, 0), max(y0, 0)
    xb, yb = min(x0 + gw, world.area[0]), min(y0 + gh, world.area[1])
    mats = world._mat_map[xa:xb, ya:yb]
    objs = world._obj_map[xa:xb, ya:yb]
    free = objs == 0
    names = {material_name(world._mat_names[m]) for m in set(mats[free].tolist())}
    names.update(object_name(world._objects[i]) for i in set(objs[~free].tolist()))
    names.discard(None)
    return sorted(names - _HIDDEN_IN_VIEW)


def target_name(world: Any, player: Any, version: int) -> str | None:
    """Name of what the player faces, or None (nothing nameable, or outside the world)."""
    target = (player.pos[0] + player.facing[0], player.pos[1] + player.facing[1])
    material, obj = world[target]
    if obj is not None:
        return object_name(obj)
    if material is None or material in _UNTARGETED_MATERIALS:
        return None
    if material == "table" and version == 1:
        return "table"
    return material_name(material)


def state_caption(world: Any, player: Any, grid: tuple[int, int], version: int) -> str:
    return caption_of(visible_names(world, player.pos, grid), target_name(world, player, version),
                      version)


def caption_of(names: list[str], target: str | None, version: int) -> str:
    """The state caption of sorted view ``names`` and the faced ``target`` (None: nothing)."""
    caption = f"You see {join_names(names, version)}."
    if target is not None:
        caption += f" You are targeting {target}."
    return caption


def inventory_sentence(inventory: dict[str, int], version: int) -> str:
    """Items held (count > 0) in Crafter's item order; sapling is called "plant"."""
    names = []
    for item in INVENTORY_ITEMS:
        if inventory.get(item, 0) > 0:
            name = "plant" if item == "sapling" else item
            names.append(name if version == 1 else name.replace("_", " "))
    if not names:
        return ""
    return "You have in your inventory " + ", ".join(names) + "."


def status_sentence(inventory: dict[str, int]) -> str:
    """Needs below their maximum, in the order health, food, drink, energy."""
    words = [word for stat, word in STATUS_WORDS.items() if inventory[stat] < STATUS_FULL]
    if not words:
        return ""
    return "You feel " + ", ".join(words) + "."


def text_observation(caption: str, inventory: str, status: str) -> str:
    """The agent's language state: the three sentences, lower-cased, empty ones left out."""
    return " ".join(part for part in (caption, inventory, status) if part).lower()
