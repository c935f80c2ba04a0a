"""The seam between the Housekeep text layer and a simulator (HOUSEKEEP.md §3). What is static
comes from the episode, so the text layer is the same whichever backend runs. Python 3.8-clean."""

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
    """One step's observation; the held object is in no visible list and maps to None."""

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
