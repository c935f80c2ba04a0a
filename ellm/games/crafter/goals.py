"""ELLM's goals and goal reward on Crafter (ELLM.md §3-4), wired to Crafter's captions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ellm.games.crafter.state import TextState
from ellm.reward import GoalReward, Scored, StepData


def text_state(obs: Mapping[str, Any], info: Mapping[str, Any]) -> TextState:
    """What a suggester reads of a Crafter state: its captions and inventory counts."""
    return TextState(caption=obs["caption"], inventory=obs["inventory"], status=obs["status"],
                     inventory_counts=dict(info["inventory"]))


class CrafterGoalReward:
    """ELLM's goal reward: the transition caption (written only past the success gate) vs the goals.
    """

    name = "goal"
    per_step = True

    def __init__(self, reward: GoalReward, check_success: bool = True):
        self.reward = reward
        self.check_success = check_success
        self.matches = 0

    def reset(self) -> None:
        self.matches = 0

    def step(self, data: StepData) -> Scored:
        info = data.info
        caption = info["transition_caption"] if self.check_success else info["action_name"]
        value, matched = self.reward(caption, data.goals)
        self.matches += matched is not None
        return Scored(value, matched)

    def episode_metrics(self) -> dict[str, float]:
        return {"goal_matches": float(self.matches)}
