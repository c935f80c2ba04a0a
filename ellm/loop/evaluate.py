"""Evaluation episodes on a separate env with the agent's eval epsilon, by the one rollout."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ellm.games import Game
from ellm.goals import Goals
from ellm.loop import interrupt
from ellm.loop.rollout import DIAGNOSTICS, Rollout


class Evaluator:
    """``run(agent, frame) -> metrics``; ``goal_rollout`` runs the single-goal episodes."""

    def __init__(self, rollout: Rollout, game: Game, *, stats_path: str | Path,
                 num_episodes: int, single_goals: Sequence[str] = (),
                 goal_rollout: Rollout | None = None, sources: Sequence[Goals] = (),
                 keep_until: int | None = None):
        self.rollout, self.game = rollout, game
        self.goal_rollout = goal_rollout
        self.num_episodes = num_episodes
        self.single_goals = list(single_goals)
        self.sources = list(sources)
        self.stats = game.stats_writer(stats_path, keep_until=keep_until)

    @property
    def env(self) -> Any:
        return self.rollout.env

    def run(self, agent: Any, frame: int) -> dict[str, float]:
        if self.num_episodes == 0:
            return {}
        episodes, summaries = [], []
        for _ in range(self.num_episodes):
            stats, summary = self._episode(agent, frame)
            self.stats.write({**stats, "frame": frame})
            episodes.append(stats)
            summaries.append(summary)
        plugin_metrics = [k for r in self.rollout.rewards for k in r.episode_metrics()]
        metrics = {
            "eval/episode_length": float(np.mean([ep["length"] for ep in episodes])),
            "eval/intrinsic_reward": float(np.mean([s["reward"] for s in summaries])),
            **{f"eval/{k}": float(np.mean([s[k] for s in summaries]))
               for k in (*DIAGNOSTICS, *plugin_metrics)},
            **self.game.eval_metrics(episodes, self.sources),
        }
        for goal in self.single_goals:
            wins = [self._goal_episode(agent, goal, frame) for _ in range(self.num_episodes)]
            metrics[f"goals/{goal.replace(' ', '_')}"] = 100.0 * float(np.mean(wins))
        return metrics

    def _episode(self, agent: Any, frame: int) -> tuple[dict[str, float], dict[str, float]]:
        """One episode with the method's goals: (the game's episode stats, the rollout's summary).
        """
        self.rollout.reset()
        interrupt.check()
        while True:
            step = self.rollout.step(lambda inputs: agent.act(inputs, frame, eval_mode=True))
            if step.last:
                return dict(step.info["episode_stats"]), self.rollout.summary()

    def _goal_episode(self, agent: Any, goal: str, frame: int) -> bool:
        """Show only ``goal``; success = the game says the goal was achieved."""
        assert self.goal_rollout is not None, "single goals need a goal rollout"
        self.goal_rollout.reset(goals=[goal])
        interrupt.check()
        while True:
            step = self.goal_rollout.step(lambda inputs: agent.act(inputs, frame, eval_mode=True))
            if self.game.goal_achieved(step.info, goal):
                return True
            if step.last:
                return False
