"""One step of an episode, written once: training, evaluation and actors all run it.

A step is scored against the goals the agent was shown before new goals replace them: a goal
pays for the transition it asked for.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from ellm.agent.frames import FrameStack
from ellm.agent.inputs import AgentInputs
from ellm.goals import Goals
from ellm.reward import StepData, StepReward


@dataclass(frozen=True)
class Step:
    """What one env step produced."""

    action: int
    reward: float
    obs: Mapping[str, Any]
    info: Mapping[str, Any]
    goals: list[str]
    frame: np.ndarray
    last: bool


@dataclass
class EpisodeTally:
    """Running totals of the episode in progress."""

    length: int = 0
    reward: float = 0.0
    returns: dict[str, float] = field(default_factory=dict)
    actions: Counter[int] = field(default_factory=Counter)
    no_effect: int = 0
    covered: set[Hashable] = field(default_factory=set)
    captions: set[str] = field(default_factory=set)


# Per-episode columns (train/ and eval/): action collapse and exploration.
COLLAPSE = ("action_entropy", "top_action_share", "noop_share")
EXPLORATION = ("coverage", "distinct_captions")
DIAGNOSTICS = COLLAPSE + EXPLORATION


def action_diagnostics(actions: Counter[int], no_effect: int) -> dict[str, float]:
    """How varied an episode's actions were: entropy, top action share and no-op share."""
    total = sum(actions.values())
    if not total:
        return {"action_entropy": 0.0, "top_action_share": 0.0, "noop_share": 0.0}
    probs = np.array(list(actions.values()), dtype=np.float64) / total
    return {"action_entropy": float(-(probs * np.log(probs)).sum()) + 0.0,
            "top_action_share": float(probs.max()),
            "noop_share": no_effect / total}


def _covers_nothing(_info: Mapping[str, Any]) -> Iterable[Hashable]:
    return ()


class Rollout:
    """Runs episodes of ``env`` one step at a time; ``covered`` feeds the ``coverage`` column."""

    def __init__(self, env: gym.Env, goals: Goals, rewards: Sequence[StepReward],
                 inputs: AgentInputs, frame_stack: int,
                 covered: Callable[[Mapping[str, Any]], Iterable[Hashable]] = _covers_nothing):
        self.env, self.goal_source, self.rewards = env, goals, list(rewards)
        self.inputs, self.covered = inputs, covered
        self.stack = FrameStack(frame_stack)
        self.obs: Mapping[str, Any] = {}
        self.goals: list[str] = []
        self.frames: np.ndarray | None = None
        self.tally = EpisodeTally()

    def reset(self, goals: Sequence[str] | None = None) -> np.ndarray:
        """Start an episode; ``goals`` fixes the whole episode's goals (single-goal evaluation)."""
        obs, info = self.env.reset()
        self._fixed = None if goals is None else list(goals)
        self.goals = self._fixed if self._fixed is not None else self.goal_source.reset(obs, info)
        for reward in self.rewards:
            reward.reset()
        self.obs = obs
        self.frames = self.stack.reset(self.inputs.frame(obs["image"]))
        self.tally = EpisodeTally(returns={r.name: 0.0 for r in self.rewards})
        return self.frames[-1]

    def agent_inputs(self) -> dict[str, Any]:
        """What the agent reads of the current state."""
        return self.inputs(self.frames, self.obs, self.goals)

    def step(self, act: Callable[[dict[str, Any]], int],
             timer: Callable[[str], Any] | None = None) -> Step:
        """One env step with the action ``act`` chooses for the current state's inputs."""
        clock = timer or _no_timer
        with clock("act"):
            action = act(self.agent_inputs())
        with clock("env"):
            obs, game_reward, terminated, truncated, info = self.env.step(action)
        with clock("lm_reward"):
            data = StepData(action, float(game_reward), info, self.goals)
            scored = [plugin.step(data) for plugin in self.rewards]
            for plugin, (value, _) in zip(self.rewards, scored):
                self.tally.returns[plugin.name] += value
            # Summed with no 0.0 in front: one plug-in's value is stored bit for bit.
            reward = functools.reduce(operator.add, [s.value for s in scored]) if scored else 0.0
            if self._fixed is None:
                achieved = [s.achieved for s in scored if s.achieved is not None]
                self.goals = self.goal_source.observe(obs, info, achieved)
        self.obs = obs
        self.frames = self.stack.push(self.inputs.frame(obs["image"]))
        self._count(action, reward, info)
        return Step(action, reward, obs, info, self.goals,
                    self.frames[-1], bool(terminated or truncated))

    def _count(self, action: int, reward: float, info: Mapping[str, Any]) -> None:
        tally = self.tally
        tally.length += 1
        tally.reward += reward
        tally.actions[int(action)] += 1
        tally.no_effect += not info.get("effective_success", True)
        tally.covered.update(self.covered(info))
        if caption := info.get("transition_caption"):
            tally.captions.add(caption)

    def summary(self) -> dict[str, float]:
        """The finished (or current) episode's returns and plug-in, action and exploration metrics.
        """
        tally = self.tally
        out = {"length": float(tally.length), "reward": tally.reward,
               **{f"return/{name}": value for name, value in tally.returns.items()},
               **action_diagnostics(tally.actions, tally.no_effect),
               "coverage": float(len(tally.covered)),
               "distinct_captions": float(len(tally.captions))}
        for plugin in self.rewards:
            out.update(plugin.episode_metrics())
        return out


class _NoTimer:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _no_timer(_name: str) -> _NoTimer:
    return _NoTimer()


__all__ = ["COLLAPSE", "DIAGNOSTICS", "EXPLORATION", "EpisodeTally", "Rollout", "Step",
           "action_diagnostics"]
