"""``ImageOnly``: a game's training env seen as its pixels alone, the form that pixel-based RL
libraries (Stable-Baselines3's ``check_env``, ``PPO``, ``DQN``) accept.

A training id's observation is a Dict of the ``image`` and text fields (captions, inventory);
SB3 takes a Dict only of arrays, so its checker and its policies stop at the first text field.
The text stays readable through ``env.unwrapped``; the step's captions stay in ``info``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class ImageOnly(gym.ObservationWrapper):
    """``env``'s observation is its ``image`` (a Box of uint8 H x W x 3), nothing else."""

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
