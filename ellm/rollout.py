"""One step of an episode, written once: training, evaluation and actors all run it.

A :class:`Rollout` owns an env, the goal source that shows goals to the agent and the run's
per-step rewards (:class:`ellm.reward.StepReward`). :meth:`Rollout.step` acts with the policy
it is given, steps the env, scores the step against the goals the agent was shown (before the
new goals replace them: a goal pays for the transition it asked for), observes the new goals
and stacks the new frame. It returns the :class:`Step` a caller stores or counts; what an
episode amounted to (its returns, the rewards' own metrics, how varied its actions were, how
much of the world it reached) is :meth:`Rollout.summary` once it ends.
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

from ellm.frames import FrameStack
from ellm.goals import Goals
from ellm.inputs import AgentInputs
from ellm.reward import StepData, StepReward


@dataclass(frozen=True)
class Step:
    """What one env step produced."""

    action: int
    reward: float  # the sum of the run's per-step rewards: what the replay stores
    game_reward: float
    obs: Mapping[str, Any]
    info: Mapping[str, Any]
    goals: list[str]  # the goals for the new state
    frame: np.ndarray  # the new grayscale frame (the last of the stack)
    last: bool  # terminated or truncated


@dataclass
class EpisodeTally:
    """Running totals of the episode in progress."""

    length: int = 0
    reward: float = 0.0
    returns: dict[str, float] = field(default_factory=dict)  # per reward plug-in
    actions: Counter[int] = field(default_factory=Counter)
    no_effect: int = 0
    covered: set[Hashable] = field(default_factory=set)  # the game's keys of what was reached
    captions: set[str] = field(default_factory=set)  # distinct non-empty transition captions


# The per-episode columns logged as train/<key> and eval/<key>: how varied the actions were
# (collapse) and how much of the world the episode reached (exploration).
COLLAPSE = ("action_entropy", "top_action_share", "noop_share")
EXPLORATION = ("coverage", "distinct_captions")
DIAGNOSTICS = COLLAPSE + EXPLORATION


def action_diagnostics(actions: Counter[int], no_effect: int) -> dict[str, float]:
    """How varied an episode's actions were: ``action_entropy`` (nats) of their distribution,
    ``top_action_share`` of the most frequent one and ``noop_share`` of those that changed
    nothing (the game says the action had no effect). A policy collapsed onto one action has
    entropy 0 and top share 1."""
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
    """Runs episodes of ``env`` one step at a time (see the module docstring). ``covered``
    names what of the world a step's info reached (the game's :meth:`~ellm.games.Game.covered`);
    an episode's ``coverage`` is how many distinct names it saw."""

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
        """Start an episode; returns its first frame. ``goals`` fixes the goals shown for the
        whole episode (a single goal's evaluation) instead of asking the goal source."""
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
            values = [plugin.step(data) for plugin in self.rewards]
            for plugin, value in zip(self.rewards, values):
                self.tally.returns[plugin.name] += value
            # Summed in the plug-ins' order, with no 0.0 in front: the stored reward is the
            # one plug-in's value bit for bit when there is one.
            reward = functools.reduce(operator.add, values) if values else 0.0
            if self._fixed is None:
                self.goals = self.goal_source.observe(obs, info)
        self.obs = obs
        self.frames = self.stack.push(self.inputs.frame(obs["image"]))
        self._count(action, reward, info)
        return Step(action, reward, float(game_reward), obs, info, self.goals,
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
        """The finished (or current) episode: length, return, each plug-in's return as
        ``return/<name>``, the plug-ins' own episode metrics, the action diagnostics and the
        exploration ones (``coverage``, ``distinct_captions``)."""
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
