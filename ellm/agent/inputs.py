"""What the agent sees of a step: stacked grayscale frames, and the text and goal it reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ellm.agent.frames import to_gray84
from ellm.goals import goal_text


@dataclass
class AgentInputs:
    """The agent's observation, as the run is configured: ``frame`` turns a render into a
    grayscale frame, ``goal_text`` goals into the goal sentence (both the game's, by setting)."""

    use_language_state: bool
    use_goal: bool
    goal_text: Callable[[list[str]], str] = goal_text
    frame: Callable[[np.ndarray], np.ndarray] = to_gray84

    def text(self, obs: dict[str, Any]) -> str:
        return obs["text_obs"] if self.use_language_state else ""

    def goal(self, goals: list[str]) -> str:
        return self.goal_text(goals) if self.use_goal else ""

    def __call__(self, frames: np.ndarray, obs: dict[str, Any], goals: list[str]) -> dict:
        return {"frames": frames, "text_obs": self.text(obs), "goal": self.goal(goals)}
