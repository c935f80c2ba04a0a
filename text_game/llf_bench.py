"""Our language-feedback envs inside LLF-Bench's wrapper class, by which its tools know its envs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from llfbench.envs.llf_env import LLFWrapper

from text_game.llf import LanguageFeedbackEnv


class LLFBenchWrapper(LLFWrapper):

    def __init__(self, env: LanguageFeedbackEnv):
        # Not LLFWrapper.__init__: it would nest our observation dict inside another one.
        gym.Wrapper.__init__(self, env)
        self.INSTRUCTION_TYPES = env.INSTRUCTION_TYPES
        self.FEEDBACK_TYPES = env.FEEDBACK_TYPES

    @property
    def instruction_type(self) -> str:
        return self.env.instruction_type

    @property
    def feedback_type(self) -> Any:
        return self.env.feedback_type

    def set_instruction_type(self, instruction_type: str) -> None:
        self.env.set_instruction_type(instruction_type)

    def set_feedback_type(self, feedback_type: Any) -> None:
        self.env.set_feedback_type(feedback_type)

    @property
    def reward_range(self) -> tuple[float, float]:
        return self.env.reward_range  # gymnasium 1 wrappers no longer forward it

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        return self.env.step(action)
