"""Where a step's goals come from: the LM suggester, or a single finetuning task.

:class:`GoalSource` hides the two modes of ELLM.md §4 from the training loop:

- pretraining: goals = the suggester's goals for the current state; the reward of a step is
  :class:`~ellm.reward.GoalReward` of the transition caption against the goals of the state the
  action was taken in, and a matched goal is marked achieved (novelty bonus);
- single task: the goal is the task (or the current subtask), paid by
  :class:`~ellm.reward.SingleTaskReward`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ellm.lm import GoalSuggester, TextState
from ellm.reward import GoalReward, SingleTaskReward


class Goals(Protocol):
    """Goals for the agent and the intrinsic reward of each step, as the training loop sees
    them (:class:`GoalSource` for Crafter, :class:`ellm.housekeep.HousekeepGoalSource`)."""

    suggester: Any  # its ``metrics()`` are the run's ``lm/`` counters
    matches: int  # steps of the episode whose transition achieved a goal

    def reset(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]: ...

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]: ...

    def reward(self, info: Mapping[str, Any]) -> float: ...


def goal_text(goals: Sequence[str], paper_setting: bool = False) -> str:
    """The goal string an agent with ``use_goal`` reads: in the paper setting as the original
    wrote it (goals joined by spaces, "Your goal is: ." when there is none), else as a list."""
    if paper_setting:
        return f"Your goal is: {' '.join(goals)}."
    return f"Your goal is: {', '.join(goals) if goals else 'none'}."


def text_state(obs: Mapping[str, Any], info: Mapping[str, Any]) -> TextState:
    return TextState(
        caption=obs["caption"], inventory=obs["inventory"], status=obs["status"],
        inventory_counts=dict(info["inventory"]))


class GoalSource:
    """Goals for the agent and the intrinsic reward of each step."""

    def __init__(
        self,
        suggester: GoalSuggester,
        goal_reward: GoalReward | None,
        single_task: SingleTaskReward | None = None,
        check_success: bool = True,
        show_goals: bool = True,
    ):
        self.suggester = suggester
        self.goal_reward = goal_reward
        self.single_task = single_task
        self.show_goals = show_goals  # False: the agent is shown no goal (the paper's extrinsic runs)
        self.check_success = check_success and getattr(suggester, "uses_success_gate", True)
        self.goals: list[str] = []
        self.matches = 0

    def reset(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
        self.suggester.reset()
        if self.single_task is not None:
            self.single_task.reset()
        return self.observe(obs, info)

    def observe(self, obs: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
        """Goals for the state just observed (kept for the next reward)."""
        if self.single_task is not None:
            self.goals = [self.single_task.goal]
        elif self.show_goals:
            self.goals = self.suggester.suggest(text_state(obs, info))
        return self.goals

    def reward(self, info: Mapping[str, Any]) -> float:
        """Intrinsic reward of the step just taken, against the previous state's goals."""
        if self.single_task is not None:
            return self.single_task(info["action_name"], info["effective_success"], info)
        if self.goal_reward is None:  # extrinsic runs: the game reward is used instead
            return 0.0
        caption = info["transition_caption"] if self.check_success else info["action_name"]
        value, matched = self.goal_reward(caption, self.goals)
        if matched is not None:
            self.suggester.mark_achieved(matched)
            self.matches += 1
        return value
