"""Crafter with text: gymnasium environments ``CrafterTextEnv-v1/-v2`` and ``CrafterReward-v1``.

Upstream ``crafter.Env`` plus captions, the success flags of ELLM.md §2.2 and the
termination/truncation split; ``v1`` is the paper's behaviour (docs/fidelity.md), ``v2`` fixed.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, ClassVar

import crafter
import gymnasium as gym
import numpy as np
from crafter import constants, objects

from text_crafter import actions as acts
from text_crafter import captions
from text_crafter.rules import OrderedChunksWorld, V1Player
from text_game import render


@dataclass(frozen=True)
class EnvSpec:
    version: int
    extrinsic: bool
    reward: bool = True  # False: the game reward is always 0 (achievements are still counted)


ENV_SPECS: dict[str, EnvSpec] = {
    "CrafterTextEnv-v1": EnvSpec(version=1, extrinsic=False),
    "CrafterTextEnv-v2": EnvSpec(version=2, extrinsic=False),
    "CrafterReward-v1": EnvSpec(version=1, extrinsic=True),
    "CrafterNoReward-v1": EnvSpec(version=1, extrinsic=False, reward=False),
}

_CREATURES = (objects.Zombie, objects.Skeleton, objects.Cow)
_TEXT_SPACE = gym.spaces.Text(max_length=1024, min_length=0, charset=string.printable)


class CrafterTextEnv(gym.Env):
    """Crafter whose observations and infos carry text."""

    metadata: ClassVar[dict[str, Any]] = dict(render.METADATA)  # a copy: gymnasium may edit it

    def __init__(
        self,
        version: int = 1,
        extrinsic: bool = False,
        reward: bool = True,
        action_space_type: str = "harder",
        length: int = 400,
        dying: bool = True,
        seed: int | None = None,
        area: tuple[int, int] = (64, 64),
        view: tuple[int, int] = (9, 9),
        size: tuple[int, int] = (64, 64),
        render_mode: str | None = None,
    ):
        if version not in (1, 2):
            raise ValueError(f"version must be 1 or 2, got {version!r}")
        self.render_mode = render.checked_render_mode(render_mode)
        self.version = version
        self.extrinsic = extrinsic
        self.reward = reward
        self.action_space_type = action_space_type
        self.action_names: tuple[str, ...] = acts.action_names(action_space_type)
        self.good_actions = acts.GOOD_ACTIONS
        self.synonyms = acts.SYNONYMS
        self.dying = dying
        self.length = length
        self._seed = seed
        self._engine_kwargs = {"area": tuple(area), "view": tuple(view), "size": tuple(size)}
        self._engine = self._new_engine(seed)
        view = np.array(self._engine._view)
        item_rows = int(np.ceil(len(crafter.constants.items) / view[0]))
        self._grid = (int(view[0]), int(view[1]) - item_rows)
        self._upstream_index = {name: i for i, name in enumerate(crafter.constants.actions)}
        self._unlocked: set[str] = set()
        self._episode_reward = 0.0
        self.action_space = gym.spaces.Discrete(len(self.action_names))
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0, 255, tuple(self._engine._size) + (3,), np.uint8),
            "caption": _TEXT_SPACE,
            "inventory": _TEXT_SPACE,
            "status": _TEXT_SPACE,
            "text_obs": _TEXT_SPACE,
        })

    def _new_engine(self, seed: int | None) -> crafter.Env:
        engine = crafter.Env(**self._engine_kwargs, length=self.length, seed=seed)
        # The semantic map keys object ids by exact type; give the v1 player the player's id.
        ids = engine._sem_view._obj_ids
        ids[V1Player] = ids[objects.Player]
        engine._world.__class__ = OrderedChunksWorld  # seeds reproduce; see text_crafter.rules
        return engine

    @property
    def world(self) -> Any:
        return self._engine._world

    @property
    def player(self) -> Any:
        return self._engine._player

    @property
    def episode_count(self) -> int:
        """Resets so far: a resumed run sets it so as not to replay the seed's first worlds."""
        return int(self._engine._episode)

    @episode_count.setter
    def episode_count(self, count: int) -> None:
        self._engine._episode = int(count)

    def describe(self) -> dict[str, str]:
        caption = captions.state_caption(self.world, self.player, self._grid, self.version)
        inventory = captions.inventory_sentence(self.player.inventory, self.version)
        status = captions.status_sentence(self.player.inventory)
        return {
            "caption": caption,
            "inventory": inventory,
            "status": status,
            "text_obs": captions.text_observation(caption, inventory, status),
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._seed = seed
            self._engine = self._new_engine(seed)
        image = self._engine.reset()
        if self.version == 1:
            # Swap in ELLM's rule variant; V1Player adds no state, only two method overrides.
            self.player.__class__ = V1Player
        self._unlocked = set()
        self._episode_reward = 0.0
        info = {
            "inventory": self.player.inventory.copy(),
            "achievements": self.player.achievements.copy(),
        }
        return self._observation(image), info

    def step(self, action: int):
        name = self._action_name(action)
        player, world = self.player, self.world
        material, target_obj = world[player.pos + np.array(player.facing)]
        target = captions.target_name(world, player, version=2)
        # Crafter's "do" (crafter space) is named, gated and judged as the action it carries out.
        name = acts.executed_name(name, target)
        before = _Snapshot.take(player, target_obj)

        upstream, needed = acts.UPSTREAM.get(name, ("noop", None))
        if needed is not None and needed != target:
            upstream = "noop"
        image, upstream_reward, _, engine_info = self._engine.step(self._upstream_index[upstream])

        effective = before.effective(name, upstream, player, target_obj)
        noun = acts.action_noun(name)
        if self.version == 1:
            plausible = effective or _v1_plausible(name, noun, before, material, target_obj)
        else:
            plausible = effective or (noun is not None and (
                noun == target or noun in _held_nouns(before.inventory)))
        gate = plausible if self.version == 1 else effective

        unlocked = sorted(
            a for a, n in player.achievements.items() if n > 0 and a not in self._unlocked)
        self._unlocked.update(unlocked)
        if not self.reward:
            reward = 0.0
        elif self.version == 1:
            reward = 1.0 if unlocked else 0.0
        else:
            reward = float(upstream_reward)
        self._episode_reward += reward

        dead = player.health <= 0
        timeout = self._engine._step >= self.length
        terminated = self.dying and dead
        truncated = timeout and not terminated
        if self.version == 1 and truncated:
            terminated, truncated = True, False  # the original stored time-outs as terminal
        info = {
            "action_name": name,
            "transition_caption": name if gate else "",
            "effective_success": effective,
            "plausible_success": plausible,
            "game_reward": reward,
            "unlocked": unlocked,
            "achievements": engine_info["achievements"],
            "inventory": engine_info["inventory"],
            "discount": 0.0 if terminated else 1.0,
            "dead": dead,
            "player_pos": engine_info["player_pos"].copy(),  # the engine reuses the array
        }
        if effective and name.split(" ", 1)[0] in ("place", "make"):
            info["placed_neighbours"] = self._around(player.pos + np.array(player.facing))
        if terminated or truncated:
            info["episode_stats"] = self.episode_stats()
        return self._observation(image), reward, terminated, truncated, info

    def _around(self, cell: np.ndarray) -> dict[tuple[int, int], tuple[str | None, str | None]]:
        out = {}
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                if dx or dy:
                    material, obj = self.world[cell + np.array((dx, dy))]
                    out[(dx, dy)] = (material, None if obj is None else captions.object_name(obj))
        return out

    def episode_stats(self) -> dict[str, float]:
        stats: dict[str, float] = {
            "length": self._engine._step, "reward": round(self._episode_reward, 1)}
        for key, value in self.player.achievements.items():
            stats[f"achievement_{key}"] = value
        return stats

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:  # gymnasium's convention: no mode, no frame, a warning
            render.warn_no_render_mode(self, "CrafterTextEnv-v1")
            return None
        return self._engine.render()

    def _observation(self, image: np.ndarray) -> dict[str, Any]:
        return {"image": image, **self.describe()}

    def _action_name(self, action: int) -> str:
        try:
            index = int(action)
        except (TypeError, ValueError):
            raise ValueError(f"action must be an integer id, got {action!r}") from None
        if index != action or not 0 <= index < len(self.action_names):
            raise ValueError(
                f"action {action!r} is out of range for action_space_type="
                f"{self.action_space_type!r}: valid ids are 0..{len(self.action_names) - 1}")
        return self.action_names[index]


@dataclass
class _Snapshot:
    pos: tuple[int, int]
    sleeping: bool
    achievements: dict[str, int]
    inventory: dict[str, int]
    target_health: int | None

    @classmethod
    def take(cls, player: Any, target_obj: Any) -> _Snapshot:
        return cls(
            pos=tuple(player.pos),
            sleeping=player.sleeping,
            achievements=player.achievements.copy(),
            inventory=player.inventory.copy(),
            target_health=target_obj.health if isinstance(target_obj, _CREATURES) else None,
        )

    def effective(self, name: str, upstream: str, player: Any, target_obj: Any) -> bool:
        """Did the executed action have its real game effect (ELLM.md §2.2)?"""
        if upstream == "noop":
            return name == "do nothing"
        if upstream.startswith("move_"):
            return tuple(player.pos) != self.pos
        if upstream == "sleep":
            return player.sleeping
        if self.target_health is not None and upstream == "do":
            return target_obj.health < self.target_health
        return any(
            count > self.achievements[a]
            for a, count in player.achievements.items() if a != "wake_up")


def _v1_plausible(name: str, noun: str | None, before: _Snapshot, material: str | None,
                  obj: Any) -> bool:
    """The original's action success (docs/fidelity.md, "success gate")."""
    if before.sleeping and before.inventory["energy"] < constants.items["energy"]["max"]:
        return name == "sleep"
    if noun is None:
        return False
    names = {material} | ({type(obj).__name__.lower()} if obj is not None else set())
    return noun in names or before.inventory.get(noun.replace(" ", "_"), 0) > 0


def _held_nouns(inventory: dict[str, int]) -> set[str]:
    held = set()
    for item in captions.INVENTORY_ITEMS:
        if inventory.get(item, 0) > 0:
            held.add("plant" if item == "sapling" else item.replace("_", " "))
    return held


def make(env_id: str, **kwargs: Any) -> CrafterTextEnv:
    """Build an environment by id; an unknown id raises listing the valid ones."""
    try:
        spec = ENV_SPECS[env_id]
    except KeyError:
        raise ValueError(
            f"unknown Text-Crafter env id {env_id!r}; valid ids: {sorted(ENV_SPECS)}") from None
    return CrafterTextEnv(version=spec.version, extrinsic=spec.extrinsic, reward=spec.reward,
                          **kwargs)
