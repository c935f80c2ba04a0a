"""``ImageOnly``: a training env as its pixels alone, as SB3 stops at a Dict's first text field."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class ImageOnly(gym.ObservationWrapper):

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict) or not isinstance(
                space.spaces.get("image"), gym.spaces.Box):
            raise TypeError(f"ImageOnly needs an observation Dict with an 'image' Box, as the "
                            f"training ids have; got {space}")
        self.observation_space = space["image"]

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        return observation["image"]


__all__ = ["ImageOnly"]
