"""Text-Housekeep: one fixed Housekeep episode as a gymnasium env with text (docs/housekeep.md).
The text layer is the same whichever backend runs and knows nothing of LMs or RL: the LM layer
reads a :class:`HousekeepView` in ``info["view"]``."""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from text_game import render
from text_housekeep.backend import FAILED, PICK, PLACE, Backend, BackendState
from text_housekeep.data import Episode
from text_housekeep.text import (
    object_name,
    receptacle_name,
    text_observation,
    transition_caption,
)

ENV_ID = "Housekeep"  # the original's name: version 1
# Version 1 stores a time-out as terminal, as the original did; version 2 as a truncation.
ENV_VERSIONS = {ENV_ID: 1, "Housekeep-v1": 1, "Housekeep-v2": 2}
GYM_IDS = ("Housekeep-v1", "Housekeep-v2")
STAT_KEYS = ("rearrange_success", "misplaced_success", "pick_success", "place_success",
             "soft_score", "picks", "places", "failed_actions")
_TEXT_SPACE = gym.spaces.Text(max_length=4096, min_length=0, charset=string.printable)


@dataclass(frozen=True)
class HousekeepView:
    """What the LM layer reads about the current state (indices as in the backend)."""

    episode: Episode
    object_names: tuple[str, ...]
    receptacle_names: tuple[str, ...]
    visible_objects: tuple[int, ...]
    seen_receptacles: tuple[int, ...]  # first-seen order
    held: int | None
    mapping: tuple[int | None, ...]

    def is_correct(self, obj: int, rec: int) -> bool:
        """Ground truth: is ``rec`` a correct receptacle for ``obj``?"""
        return rec in self.episode.correct[obj]


class HousekeepTextEnv(gym.Env):
    """Text-Housekeep on ``backend``, which ``close()`` closes."""

    metadata: ClassVar[dict[str, Any]] = dict(render.METADATA)  # a copy: gymnasium may edit it
    extrinsic = False  # trained on LM rewards (the game reward is logged and evaluated)

    def __init__(self, episode: Episode, backend: Backend, length: int = 1000,
                 language_state: bool = True, image_shape: tuple[int, int, int] = (84, 84, 3),
                 version: int = 1, render_mode: str | None = None):
        self.render_mode = render.checked_render_mode(render_mode)
        if length < 1:
            raise ValueError(f"env_spec.housekeep_length must be >= 1, got {length}")
        if version not in (1, 2):
            raise ValueError(f"version must be 1 or 2, got {version!r}")
        self.version = version
        self.episode = episode
        self.backend = backend
        self.length = length
        self.language_state = language_state
        self.action_names = tuple(backend.action_names)
        self.object_names = tuple(object_name(o.category) for o in episode.scene_objects)
        self.receptacle_names = tuple(receptacle_name(r) for r in episode.receptacles)
        self.action_space = gym.spaces.Discrete(len(self.action_names))
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0, 255, image_shape, np.uint8),
            "text_obs": _TEXT_SPACE,
        })
        self._state: BackendState | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._state = self.backend.reset()
        self._steps = 0
        self._reward = 0.0
        self._seen_objects: dict[int, None] = {}
        self._seen_recs: dict[int, None] = {}
        self._picked: set[int] = set()
        self._placed_right: set[int] = set()
        self._counts = {"picks": 0, "places": 0, "failed_actions": 0}
        self._correct = self._num_correct(self._state)
        self._remember(self._state)
        return self._observation(), {"view": self.view()}

    def step(self, action: int):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        state = self.backend.step(action)  # raises BackendError on an invalid action
        name = self.action_names[int(action)]
        self._state = state
        self._steps += 1
        event = state.event
        if event.kind == PICK:
            self._counts["picks"] += 1
            self._picked.add(event.obj)
        elif event.kind == PLACE:
            self._counts["places"] += 1
            if event.rec in self.episode.correct[event.obj]:
                self._placed_right.add(event.obj)
        elif event.kind == FAILED:
            self._counts["failed_actions"] += 1
        self._remember(state)
        correct = self._num_correct(state)
        reward = float(correct - self._correct)
        self._correct = correct
        self._reward += reward
        terminated = correct == len(state.mapping) and state.held is None
        truncated = self._steps >= self.length and not terminated
        if self.version == 1 and truncated:
            terminated, truncated = True, False  # the original stored time-outs as terminal
        info: dict[str, Any] = {
            "action_name": name,
            "event": event,
            "transition_caption": transition_caption(event, self.episode),
            "effective_success": event.kind != FAILED,
            "game_reward": reward,
            "discount": 0.0 if terminated else 1.0,
            "view": self.view(),
        }
        if terminated or truncated:
            info["episode_stats"] = self.episode_stats()
        return self._observation(), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            render.warn_no_render_mode(self, "Housekeep-v1")
            return None
        if self._state is None:
            raise RuntimeError("call reset() before render()")
        return self._state.image

    def close(self) -> None:
        self.backend.close()

    def view(self) -> HousekeepView:
        state = self._state
        return HousekeepView(
            episode=self.episode, object_names=self.object_names,
            receptacle_names=self.receptacle_names, visible_objects=state.visible_objects,
            seen_receptacles=tuple(self._seen_recs), held=state.held, mapping=state.mapping)

    def text(self) -> str:
        """The text observation now (whether or not the agent is given it)."""
        objects = _unique(self.object_names[o] for o in self._seen_objects)
        recs = _unique(self.receptacle_names[r] for r in self._seen_recs)
        held = self._state.held
        return text_observation(objects, recs, None if held is None else self.object_names[held])

    def episode_stats(self) -> dict[str, float]:
        """This episode so far: ``length``, game ``reward`` and the success metrics, which
        docs/housekeep.md defines."""
        state, n = self._state, len(self._state.mapping)
        approval = self.episode.approval
        soft = [0.0 if r is None else approval[o][r] for o, r in enumerate(state.mapping)]
        return {
            "length": self._steps, "reward": self._reward,
            "rearrange_success": self._num_correct(state) / n,
            "misplaced_success": float(self._num_correct(state)),
            "pick_success": len(self._picked) / n,
            "place_success": len(self._placed_right) / n,
            "soft_score": float(np.mean(soft)),
            **{k: float(v) for k, v in self._counts.items()},
        }

    def _observation(self) -> dict[str, Any]:
        return {"image": self._state.image,
                "text_obs": self.text() if self.language_state else ""}

    def _remember(self, state: BackendState) -> None:
        for o in state.visible_objects:
            self._seen_objects.setdefault(o)
        for r in state.visible_receptacles:
            self._seen_recs.setdefault(r)

    def _num_correct(self, state: BackendState) -> int:
        return sum(r is not None and r in self.episode.correct[o]
                   for o, r in enumerate(state.mapping))


def _unique(names) -> list[str]:
    return list(dict.fromkeys(names))
