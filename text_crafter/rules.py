"""ELLM's game-rule changes, as the smallest override of upstream Crafter.

ELLM (paper setting, ``-v1`` ids) changes four rules of Crafter:

1. Base melee damage is 5, so every creature (zombie 5 HP, skeleton 3, cow 3) dies in one hit.
2. The health component of the reward is 0: the reward is +1 per step in which an achievement
   is first unlocked in the episode (computed by :class:`text_crafter.env.CrafterTextEnv`).
3. Collecting gives no item and no achievement when the item is already at its maximum (9),
   e.g. "drink water" when not thirsty; the world changes as usual (mined stone leaves path,
   drinking resets thirst).
4. A crafting table costs 1 wood (the original's own rule data), not 2.

Rules 1, 3 and 4 live in :class:`V1Player`, a subclass of ``crafter.objects.Player`` that
overrides only ``_do_object``, ``_do_material`` and ``_place`` and defers to the upstream
methods for everything else. ``-v2`` ids keep the upstream player untouched.

One more override applies to every id and changes no rule: upstream ``World`` keeps the
objects of each chunk in a ``set``, whose iteration order follows memory addresses, and the
creature balancing picks which creature to despawn by indexing that order. Two runs with the
same seed then diverge. :class:`OrderedChunksWorld` keeps each chunk in insertion order, so a
seed and an action sequence always give the same episode.
"""

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
    """Upstream world whose per-chunk object collections iterate in insertion order."""

    def reset(self, seed=None):
        super().reset(seed)
        self._chunks = collections.defaultdict(_OrderedSet)
