"""Receptacle capacity: a shelf (row) packer over a receptacle's top-surface footprint.

Housekeep packs objects on a receptacle's top surface with a 2-D shelf bin packer
(``recs_packers`` in its episodes): rows along the depth, objects side by side in a row.
:class:`ShelfPacker` does the same with first fit (either orientation of an object): an object
that fits in no row and leaves no depth for a new row does not go on the receptacle, and a
GRAB_RELEASE that tries is a failed action. Removing an object repacks the others in their
order of arrival. Units: metres; positions are relative to the footprint's corner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EPS = 1e-6


@dataclass
class _Row:
    z0: float
    depth: float
    used: float = 0.0


@dataclass
class ShelfPacker:
    """Objects on one receptacle, ``width`` x ``depth`` metres."""

    width: float
    depth: float
    _items: list[tuple[int, float, float]] = field(default_factory=list)
    _rows: list[_Row] = field(default_factory=list)
    _slots: dict[int, tuple[float, float]] = field(default_factory=dict)

    def add(self, obj: int, size: tuple[float, float], force: bool = False
            ) -> tuple[float, float] | None:
        """Put ``obj`` (footprint ``size``) on the surface; its slot centre, or None when it does
        not fit. ``force`` keeps it even then (an episode's start state, packed by Housekeep
        with a packer of its own) at the surface centre."""
        slot = self._fit(*size)
        if slot is None and not force:
            return None
        if slot is None:
            slot = (self.width / 2, self.depth / 2)
        self._items.append((obj, size[0], size[1]))
        self._slots[obj] = slot
        return slot

    def remove(self, obj: int) -> None:
        """Take ``obj`` off and repack the rest in their order of arrival."""
        items = [item for item in self._items if item[0] != obj]
        self._items, self._rows, self._slots = [], [], {}
        for other, w, d in items:
            self.add(other, (w, d), force=True)

    def fits(self, size: tuple[float, float]) -> bool:
        return self._fit(*size, commit=False) is not None

    def slot(self, obj: int) -> tuple[float, float]:
        return self._slots[obj]

    def __contains__(self, obj: int) -> bool:
        return obj in self._slots

    def __len__(self) -> int:
        return len(self._items)

    def _fit(self, w: float, d: float, commit: bool = True) -> tuple[float, float] | None:
        for width, depth in ((w, d), (d, w)):
            for row in self._rows:
                if depth <= row.depth + EPS and row.used + width <= self.width + EPS:
                    centre = (row.used + width / 2, row.z0 + depth / 2)
                    if commit:
                        row.used += width
                    return centre
            z0 = sum(row.depth for row in self._rows)
            if z0 + depth <= self.depth + EPS and width <= self.width + EPS:
                if commit:
                    self._rows.append(_Row(z0, depth, width))
                return (width / 2, z0 + depth / 2)
        return None
