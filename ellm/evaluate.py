"""Evaluation episodes on a separate env, with the agent's eval epsilon: the game's metrics
(for Crafter: achievements unlocked per episode, the Crafter score, per-achievement success
rates), the mean episode length and intrinsic return, and, with ``single_goal_eval``, each
goal's success rate when the agent is shown only that goal."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ellm.frames import FrameStack
from ellm.games import Game
from ellm.goals import Goals
from ellm.inputs import AgentInputs
from text_crafter import StatsWriter


class Evaluator:
    """``run(agent, frame) -> metrics``; episodes go to ``stats_path`` (Crafter's format)."""

    def __init__(self, env: gym.Env, goals: Goals, game: Game, inputs: AgentInputs, *,
                 stats_path: str | Path, num_episodes: int, frame_stack: int,
                 single_goals: Sequence[str] = (), train_goals: Goals | None = None,
                 keep_until: int | None = None):
        self.env, self.goals, self.game, self.inputs = env, goals, game, inputs
        self.num_episodes, self.frame_stack = num_episodes, frame_stack
        self.single_goals = list(single_goals)
        # The game's metrics may pool both goal sources (e.g. Housekeep's LM accuracy).
        self._sources = [g for g in (train_goals, goals) if g is not None]
        self.stats = StatsWriter(stats_path, keep_until=keep_until)

    def run(self, agent: Any, frame: int) -> dict[str, float]:
        if self.num_episodes == 0:
            return {}
        episodes, returns = [], []
        for _ in range(self.num_episodes):
            stats, ret = self._episode(agent, frame)
            self.stats.write({**stats, "frame": frame})
            episodes.append(stats)
            returns.append(ret)
        metrics = {
            "eval/episode_length": float(np.mean([ep["length"] for ep in episodes])),
            "eval/intrinsic_reward": float(np.mean(returns)),
            **self.game.eval_metrics(episodes, self._sources),
        }
        for goal in self.single_goals:
            wins = [self._goal_episode(agent, goal, frame) for _ in range(self.num_episodes)]
            metrics[f"goals/{goal.replace(' ', '_')}"] = 100.0 * float(np.mean(wins))
        return metrics

    def _episode(self, agent: Any, frame: int) -> tuple[dict[str, float], float]:
        """One episode with LM (or task) goals; (episode stats, intrinsic return)."""
        stack = FrameStack(self.frame_stack)
        obs, info = self.env.reset()
        goals = self.goals.reset(obs, info)
        frames = stack.reset(self.inputs.frame(obs["image"]))
        total = 0.0
        while True:
            action = agent.act(self.inputs(frames, obs, goals), frame, eval_mode=True)
            obs, _, terminated, truncated, info = self.env.step(action)
            total += self.goals.reward(info)
            goals = self.goals.observe(obs, info)
            frames = stack.push(self.inputs.frame(obs["image"]))
            if terminated or truncated:
                return info["episode_stats"], total

    def _goal_episode(self, agent: Any, goal: str, frame: int) -> bool:
        """Show only ``goal``; success = the game says the goal was achieved."""
        stack = FrameStack(self.frame_stack)
        obs, _ = self.env.reset()
        frames = stack.reset(self.inputs.frame(obs["image"]))
        while True:
            action = agent.act(self.inputs(frames, obs, [goal]), frame, eval_mode=True)
            obs, _, terminated, truncated, info = self.env.step(action)
            if self.game.goal_achieved(info, goal):
                return True
            if terminated or truncated:
                return False
            frames = stack.push(self.inputs.frame(obs["image"]))
