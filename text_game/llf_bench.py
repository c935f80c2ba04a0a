"""Our language-feedback envs under LLF-Bench's wrapper class, for LLF-Bench's own tools.

LLF-Bench's tools (its ``tests/test_envs.py``) know one of its environments by the
``LLFWrapper`` class in its wrapper chain. Where LLF-Bench is installed,
:func:`text_game.registration.as_registered` puts our env inside :class:`LLFBenchWrapper`, a
subclass that forwards everything to our env: the contract stays ours (:mod:`text_game.llf`), with LLF-Bench's
semantics. Importing this module raises ModuleNotFoundError where LLF-Bench is not installed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from llfbench.envs.llf_env import LLFWrapper

from text_game.llf import LanguageFeedbackEnv


class LLFBenchWrapper(LLFWrapper):
    """Our env, recognised as LLF-Bench's; every call goes to the env."""

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
