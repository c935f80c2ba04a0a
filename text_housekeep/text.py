"""Housekeep's words (HOUSEKEEP.md §1, docs/housekeep.md): names, the text observation and
transition captions, the same text whichever backend simulates the house."""

from __future__ import annotations

from collections.abc import Sequence

from text_housekeep.backend import PICK, PLACE, Event
from text_housekeep.data import Episode, Receptacle, room_type


def object_name(category: str) -> str:
    return category.replace("_", " ")


def receptacle_name(receptacle: Receptacle) -> str:
    room = room_type(receptacle.room)
    name = receptacle.category if room is None else f"{room} {receptacle.category}"
    return name.replace("_", " ")


def text_observation(objects: Sequence[str], receptacles: Sequence[str],
                     holding: str | None) -> str:
    parts = []
    if objects:
        parts.append(f"objects: {', '.join(objects)}.")
    if receptacles:
        parts.append(f"receptacles: {', '.join(receptacles)}.")
    if holding:
        parts.append(f"you are holding: {holding}.")
    return " ".join(parts)


def pick_caption(obj: str) -> str:
    return f"pick {obj}"


def place_caption(obj: str, receptacle: str) -> str:
    return f"{obj} in {receptacle}"


def transition_caption(event: Event, episode: Episode) -> str:
    """The caption of a step's event ("" unless it picked or placed something)."""
    if event.kind == PICK:
        return pick_caption(object_name(episode.scene_objects[event.obj].category))
    if event.kind == PLACE:
        return place_caption(object_name(episode.scene_objects[event.obj].category),
                             receptacle_name(episode.receptacles[event.rec]))
    return ""
