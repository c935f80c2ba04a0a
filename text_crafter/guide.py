"""What to do next in a Crafter state: the next step toward an action and how to get there.

Worked out from upstream Crafter's rule data and the local view, for the ``fp`` feedback of
:mod:`text_crafter.llf` (docs/llf.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from crafter import constants

from text_crafter import actions as acts
from text_crafter import captions
from text_crafter.rules import V1_PLACE_USES

WAIT: Final = "do nothing"
MOVES: Final = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
WALKABLE: Final = frozenset(constants.walkable)
PRODUCERS: Final = {
    "wood": "chop tree", "stone": "mine stone", "coal": "mine coal", "iron": "mine iron",
    "diamond": "mine diamond", "sapling": "chop grass", "drink": "drink water",
    "food": "attack cow", **{tool: f"make {tool.replace('_', ' ')}" for tool in constants.make},
}
STATIONS: Final = {"table": "place crafting table", "furnace": "place furnace"}
_CANONICAL: Final = {"eat cow": "attack cow", "make crafting table": "place crafting table"}
_MAX_DEPTH = 8
_MASS: Final = frozenset({"water", "grass", "stone", "coal", "iron", "diamond", "lava", "sand",
                          "path"})
Cell = tuple[int, int]


@dataclass(frozen=True)
class Advice:
    """The next step toward a wanted action and the action to take now (None: explore)."""

    wanted: str
    step: str
    action: str | None
    detail: str


def thing_at(world: Any, cell: Cell) -> str | None:
    """What occupies a cell: an object's name ("cow"), else its material ("tree")."""
    material, obj = world[cell]
    if obj is not None:
        return captions.object_name(obj)
    return material


def article(thing: str) -> str:
    """"a tree", but "water": mass nouns take no article."""
    return thing if thing in _MASS else f"a {thing}"


def offset_words(dx: int, dy: int) -> str:
    """(2, -1) -> "2 steps right and 1 step up"; (0, 0) -> "here"."""
    parts = []
    for n, neg, pos in ((int(dx), "left", "right"), (int(dy), "up", "down")):
        if n:
            parts.append(f"{abs(n)} step{'s' * (abs(n) != 1)} {neg if n < 0 else pos}")
    return " and ".join(parts) or "here"


class Guide:
    """Plans toward actions in one episode; it keeps an exploring heading between steps."""

    def __init__(self, env: Any, rng: np.random.Generator):
        self.env = env
        self.rng = rng
        self.heading = "left"
        self._heading_steps = 0

    @property
    def world(self) -> Any:
        return self.env.world

    @property
    def player(self) -> Any:
        return self.env.player

    def view_cells(self) -> list[Cell]:
        """Cells of the 9x7 view the captions describe, inside the world."""
        (px, py), (gw, gh) = map(int, self.player.pos), self.env._grid
        x0, y0 = px - gw // 2, py - gh // 2
        w, h = self.world.area
        return [(x, y) for x in range(max(x0, 0), min(x0 + gw, w))
                for y in range(max(y0, 0), min(y0 + gh, h))]

    def nearest(self, name: str) -> tuple[int, int] | None:
        """Offset of the nearest ``name`` in view (Manhattan distance), or None."""
        px, py = map(int, self.player.pos)
        found = [(abs(x - px) + abs(y - py), x - px, y - py) for x, y in self.view_cells()
                 if thing_at(self.world, (x, y)) == name and (x, y) != (px, py)]
        return min(found)[1:] if found else None

    def scan(self) -> dict[str, tuple[int, int]]:
        """Offset of the nearest thing of each kind in view, nearest kinds first."""
        px, py = map(int, self.player.pos)
        best: dict[str, tuple[int, int, int]] = {}
        for x, y in self.view_cells():
            name = thing_at(self.world, (x, y))
            if (x, y) == (px, py) or name is None:
                continue
            found = (abs(x - px) + abs(y - py), x - px, y - py)
            if name not in best or found < best[name]:
                best[name] = found
        return {n: v[1:] for n, v in sorted(best.items(), key=lambda kv: (kv[1], kv[0]))}

    def _free(self, cell: Cell) -> bool:
        material, obj = self.world[cell]
        return obj is None and material in WALKABLE

    def advise(self, wanted: str) -> Advice:
        """The next step toward ``wanted`` (a good action name) and the action to take now."""
        return self._plan(wanted, wanted, 0)

    def _plan(self, wanted: str, step: str, depth: int) -> Advice:
        if depth > _MAX_DEPTH:
            return Advice(wanted, step, None, "it needs too many steps from here")
        inv = self.player.inventory
        step = _CANONICAL.get(step, step)
        upstream, target = acts.UPSTREAM.get(step, ("noop", None))
        if upstream == "do":
            for item, n in constants.collect.get(target, {}).get("require", {}).items():
                if inv[item] < n:
                    return self._plan(wanted, PRODUCERS[item], depth + 1)
            if step == "eat plant":
                return self._eat_plant(wanted)
            return self._face(wanted, step, lambda c: thing_at(self.world, c) == target,
                              article(target))
        if upstream == "sleep":
            if inv["energy"] < constants.items["energy"]["max"]:
                return Advice(wanted, step, step, "you are tired")
            return Advice(wanted, step, WAIT,
                          "you are not tired yet: sleep works once your energy drops")
        if upstream.startswith("place_"):
            return self._place(wanted, step, upstream.removeprefix("place_"), depth)
        if upstream.startswith("make_"):
            return self._make(wanted, step, upstream.removeprefix("make_"), depth)
        return Advice(wanted, step, step, "")

    def _missing(self, uses: dict[str, int]) -> str | None:
        inv = self.player.inventory
        return next((item for item, n in uses.items() if inv[item] < n), None)

    def _place(self, wanted: str, step: str, name: str, depth: int) -> Advice:
        info = constants.place[name]
        uses = V1_PLACE_USES.get(name, info["uses"]) if self.env.version == 1 else info["uses"]
        missing = self._missing(uses)
        if missing is not None:
            return self._plan(wanted, PRODUCERS[missing], depth + 1)
        if name == "furnace" and not self._near("table"):
            # A furnace far from every table is useless: iron tools need both within reach.
            near = self._approach(wanted, step, "table")
            if near is not None:
                return near
        where = set(info["where"])
        return self._face(
            wanted, step,
            lambda c: self.world[c][1] is None and self.world[c][0] in where,
            f"free {' or '.join(sorted(where))}")

    def _make(self, wanted: str, step: str, name: str, depth: int) -> Advice:
        info = constants.make[name]
        missing = self._missing(info["uses"])
        if missing is not None:
            return self._plan(wanted, PRODUCERS[missing], depth + 1)
        for station in info["nearby"]:
            if self._near(station):
                continue
            near = self._approach(wanted, step, station)
            if near is not None:
                return near
            return self._plan(wanted, STATIONS[station], depth + 1)
        return Advice(wanted, step, step, "you have what it needs and stand by the "
                      + " and ".join(s.replace("table", "crafting table") for s in info["nearby"]))

    def _eat_plant(self, wanted: str) -> Advice:
        step = "eat plant"
        ripe = [c for c in self.view_cells() if self._is_plant(c, ripe=True)]
        if ripe:
            return self._face(wanted, step, lambda c: self._is_plant(c, ripe=True), "a ripe plant")
        if any(self._is_plant(c, ripe=False) for c in self.view_cells()):
            return Advice(wanted, step, WAIT,
                          "your plant is not ripe yet: wait by it (zombies and cows eat plants)")
        if self.player.inventory["sapling"] < 1:
            return self._plan(wanted, "chop grass", 1)
        return self._plan(wanted, "place plant", 1)

    def _is_plant(self, cell: Cell, ripe: bool) -> bool:
        obj = self.world[cell][1]
        return (obj is not None and captions.object_name(obj) == "plant"
                and bool(getattr(obj, "ripe", False)) == ripe)

    def _near(self, station: str) -> bool:
        return station in self.world.nearby(self.player.pos, 1)[0]

    def _approach(self, wanted: str, step: str, station: str) -> Advice | None:
        """Walk until ``station`` is within one cell (crafting reach); None if not in view."""
        words = "crafting table" if station == "table" else station
        targets = {c for c in self.view_cells() if self.world[c][0] == station}
        if not targets:
            return None
        move, state = self._route(lambda pos, facing: any(
            abs(pos[0] - x) <= 1 and abs(pos[1] - y) <= 1 for x, y in targets))
        if state is None:
            return Advice(wanted, step, None, f"the {words} is in view but out of reach")
        offset = self.nearest(station)
        where = f"the {words} is {offset_words(*offset)}" if offset else f"the {words}"
        return Advice(wanted, step, move or step, f"{where}: stand next to it")

    def _face(self, wanted: str, step: str, ok: Callable[[Cell], bool], what: str) -> Advice:
        """Face a cell for which ``ok`` holds, then do ``step``."""
        if not any(ok(c) for c in self.view_cells()):
            return Advice(wanted, step, None, f"no {what.removeprefix('a ')} in view")
        move, state = self._route(lambda pos, facing: ok((pos[0] + facing[0],
                                                          pos[1] + facing[1])))
        if state is None:
            return Advice(wanted, step, None, f"{what} is in view but out of reach")
        if move is None:
            return Advice(wanted, step, step, f"you face {what}")
        (x, y), (fx, fy) = state
        px, py = map(int, self.player.pos)
        return Advice(wanted, step, move, f"{what} is {offset_words(x + fx - px, y + fy - py)}")

    def _route(self, goal: Callable[[Cell, Cell], bool]) -> tuple[str | None, Any]:
        """(first move, end state) of a shortest path in view, never into lava, to a (position,
        facing) where ``goal`` holds; (None, None) when none does."""
        start = (tuple(map(int, self.player.pos)), tuple(map(int, self.player.facing)))
        if goal(*start):
            return None, start
        view = set(self.view_cells())
        first: dict[tuple[Cell, Cell], str] = {start: ""}
        queue = deque([start])
        while queue:
            pos, facing = queue.popleft()
            for name, (dx, dy) in MOVES.items():
                ahead = (pos[0] + dx, pos[1] + dy)
                if ahead not in view or self.world[ahead][0] == "lava":
                    continue
                state = (ahead if self._free(ahead) else pos, (dx, dy))
                if state in first:
                    continue
                first[state] = first[(pos, facing)] or name
                if goal(*state):
                    return f"move {first[state]}", state
                queue.append(state)
        return None, None

    def explore(self) -> str:
        """A move that keeps a heading while the way is free, never into lava."""
        px, py = self.player.pos
        free = [n for n, (dx, dy) in MOVES.items() if self._free((px + dx, py + dy))
                and self.world[(px + dx, py + dy)][0] != "lava"]
        self._heading_steps += 1
        if self.heading not in free or self._heading_steps > self.rng.integers(8, 16):
            options = [n for n in free if n != self.heading] or free or list(MOVES)
            self.heading = options[int(self.rng.integers(len(options)))]
            self._heading_steps = 0
        return f"move {self.heading}"
