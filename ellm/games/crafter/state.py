"""What a goal suggester reads about one Crafter state (ELLM.md §2.3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TextState:
    """A Crafter state as text: the caption, the inventory sentence, the status and the counts."""

    caption: str
    inventory: str = ""
    status: str = ""
    inventory_counts: Mapping[str, int] = field(default_factory=dict)
