"""The seam between the Housekeep text layer and a simulator (HOUSEKEEP.md §3).

A backend simulates one fixed :class:`~text_housekeep.data.Episode` with only its misplaced
objects in the house (object ``o`` below = ``episode.scene_objects[o]``; receptacle ``r`` =
``episode.receptacles[r]``). Per step it reports a :class:`BackendState`: what is visible, what
is held, where every object is, what the step did, and a picture. Names, rooms, categories and
the correct mapping are static and come from the episode itself, so the text layer
(:mod:`text_housekeep.env`) is identical whichever backend runs: the symbolic one
(:mod:`text_housekeep.symbolic`) or habitat-sim in another interpreter
(:mod:`text_housekeep.bridge`).

Plain Python + numpy, importable on Python 3.8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

NONE, PICK, PLACE, FAILED = "none", "pick", "place", "failed"
EVENT_KINDS = (NONE, PICK, PLACE, FAILED)


@dataclass(frozen=True)
class Event:
    """What a step did: ``pick`` object ``obj``; ``place`` ``obj`` on receptacle ``rec``;
    ``failed`` grab/release (``reason`` says why); or ``none`` (moving, turning, looking)."""

    kind: str = NONE
    obj: int | None = None
    rec: int | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"event kind must be one of {EVENT_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class BackendState:
    """One step's observation from a backend.

    ``visible_objects`` / ``visible_receptacles``: indices in view now (objects lying on a
    receptacle; the held object is not listed); ``held``: the held object or None;
    ``mapping[o]``: object ``o``'s receptacle (None while held); ``image``: uint8 [H, W, 3].
    """

    visible_objects: tuple[int, ...]
    visible_receptacles: tuple[int, ...]
    held: int | None
    mapping: tuple[int | None, ...]
    event: Event
    image: np.ndarray

    def same_as(self, other: BackendState) -> bool:
        """Equal fields and pixels (dataclass ``==`` cannot compare arrays)."""
        return (self.visible_objects == other.visible_objects
                and self.visible_receptacles == other.visible_receptacles
                and self.held == other.held and self.mapping == other.mapping
                and self.event == other.event and np.array_equal(self.image, other.image))


class Backend(Protocol):
    """A Housekeep simulator for one episode."""

    action_names: tuple[str, ...]

    def reset(self) -> BackendState:
        """Start the episode again from its start state."""

    def step(self, action: int) -> BackendState:
        """Apply action ``action`` (an index into ``action_names``)."""

    def close(self) -> None:
        """Release resources (processes, simulators)."""


class BackendError(RuntimeError):
    """A backend failed (bad action, crashed process, protocol mismatch); says which and why."""
