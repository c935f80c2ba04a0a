"""ELLM's game-rule changes (``-v1`` ids, listed in docs/fidelity.md), as the smallest override
of upstream Crafter, plus a world whose seeds reproduce (every id)."""

from __future__ import annotations

import collections

from crafter import constants, engine, objects

V1_MELEE_DAMAGE = 5
V1_PLACE_USES = {"table": {"wood": 1}}  # what placing costs where v1 differs from upstream
_CREATURES = (objects.Zombie, objects.Skeleton, objects.Cow)


def upstream_damage(inventory: dict[str, int]) -> int:
    """Melee damage the upstream player deals with this inventory (best sword)."""
    return max(
        1,
        inventory["wood_sword"] and 2,
        inventory["stone_sword"] and 3,
        inventory["iron_sword"] and 5,
    )


class V1Player(objects.Player):
    """Upstream player with ELLM's melee damage and its collect-fails-when-full rule."""

    def _do_object(self, obj):
        if isinstance(obj, _CREATURES):
            # Upstream subtracts its own damage next; take the rest first so the total is 5.
            obj.health -= max(0, V1_MELEE_DAMAGE - upstream_damage(self.inventory))
        super()._do_object(obj)

    def _do_material(self, target, material):
        # Upstream's collect, except that a full item is not received (rule 3).
        if material == "water":
            self._thirst = 0
        info = constants.collect.get(material)
        if not info or any(self.inventory[k] < v for k, v in info["require"].items()):
            return
        self.world[target] = info["leaves"]
        if self.random.uniform() > info.get("probability", 1):
            return
        for name, amount in info["receive"].items():
            if self.inventory[name] >= constants.items[name]["max"]:
                return
            self.inventory[name] += amount
            self.achievements[f"collect_{name}"] += 1

    def _place(self, name, target, material):
        uses = V1_PLACE_USES.get(name)
        if uses is None:
            return super()._place(name, target, material)
        # Upstream's placing of a material (the table), at the v1 cost (rule 4).
        info = constants.place[name]
        if self.world[target][1] or material not in info["where"]:
            return
        if any(self.inventory[k] < v for k, v in uses.items()):
            return
        for item, amount in uses.items():
            self.inventory[item] -= amount
        self.world[target] = name
        self.achievements[f"place_{name}"] += 1


class _OrderedSet(dict):
    """The two set operations ``crafter.engine.World`` uses, iterating in insertion order."""

    def add(self, item) -> None:
        self[item] = None

    def remove(self, item) -> None:
        del self[item]


class OrderedChunksWorld(engine.World):
    """Upstream world whose chunks iterate in insertion order: upstream's sets follow memory
    addresses, and despawning indexes them, so one seed gave different episodes."""

    def reset(self, seed=None):
        super().reset(seed)
        self._chunks = collections.defaultdict(_OrderedSet)
