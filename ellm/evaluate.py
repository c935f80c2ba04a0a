"""Evaluation episodes: the game reward (achievements unlocked per episode, the paper's headline
metric), the Crafter score and per-achievement success rates, and, with ``single_goal_eval``,
the success rate of each known goal when the agent is shown only that goal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ellm.frames import FrameStack, to_gray84
from ellm.goals import GoalSource
from text_crafter.actions import EASIER_ACTIONS, same_action
from text_crafter.stats import StatsWriter, crafter_score, success_rates

if TYPE_CHECKING:
    from ellm.workspace import Workspace

_NOT_GOALS = ("do nothing", "move left", "move right", "move up", "move down")


def known_goals(single_task: str | None) -> list[str]:
    """Goals evaluated one by one: the finetuning task, else every useful named action."""
    if single_task is not None:
        return [single_task]
    return [name for name in EASIER_ACTIONS if name not in _NOT_GOALS]


class Evaluator:
    """Runs evaluation episodes with the agent's eval epsilon on a separate env."""

    def __init__(self, ws: Workspace, env, goals: GoalSource, keep_until: int | None = None):
        self.ws, self.env, self.goals = ws, env, goals
        self.stats = StatsWriter(ws.run_dir / "eval" / "stats.jsonl", keep_until=keep_until)

    def run(self, frame: int) -> dict[str, float]:
        cfg = self.ws.cfg
        if cfg.num_eval_episodes == 0:
            return {}
        episodes, lengths, intrinsic = [], [], []
        for _ in range(cfg.num_eval_episodes):
            stats, ret = self._episode(frame)
            self.stats.write({**stats, "frame": frame})
            episodes.append(stats)
            lengths.append(stats["length"])
            intrinsic.append(ret)
        rates = success_rates(episodes)
        metrics = {
            "eval/episode_reward": float(np.mean(
                [sum(v > 0 for k, v in ep.items() if k.startswith("achievement_"))
                 for ep in episodes])),
            "eval/episode_length": float(np.mean(lengths)),
            "eval/intrinsic_reward": float(np.mean(intrinsic)),
            "eval/score": crafter_score(rates),
            **{f"achievements/{name}": rate for name, rate in rates.items()},
        }
        if cfg.single_goal_eval:
            for goal in known_goals(cfg.env_spec.single_task):
                wins = [self._goal_episode(goal, frame) for _ in range(cfg.num_eval_episodes)]
                metrics[f"goals/{goal.replace(' ', '_')}"] = 100.0 * float(np.mean(wins))
        return metrics

    def _episode(self, frame: int) -> tuple[dict[str, float], float]:
        """One episode with LM (or task) goals; (Crafter stats, intrinsic return)."""
        stack = FrameStack(self.ws.cfg.frame_stack)
        obs, info = self.env.reset()
        goals = self.goals.reset(obs, info)
        frames = stack.reset(to_gray84(obs["image"]))
        total = 0.0
        while True:
            action = self.ws.agent.act(self.ws.agent_obs(frames, obs, goals), frame, eval_mode=True)
            obs, _, terminated, truncated, info = self.env.step(action)
            total += self.goals.reward(info)
            goals = self.goals.observe(obs, info)
            frames = stack.push(to_gray84(obs["image"]))
            if terminated or truncated:
                return info["episode_stats"], total

    def _goal_episode(self, goal: str, frame: int) -> bool:
        """Show only ``goal``; success = the goal action is executed effectively."""
        stack = FrameStack(self.ws.cfg.frame_stack)
        obs, _ = self.env.reset()
        frames = stack.reset(to_gray84(obs["image"]))
        while True:
            action = self.ws.agent.act(self.ws.agent_obs(frames, obs, [goal]), frame, eval_mode=True)
            obs, _, terminated, truncated, info = self.env.step(action)
            if info["effective_success"] and same_action(info["action_name"], goal):
                return True
            if terminated or truncated:
                return False
            frames = stack.push(to_gray84(obs["image"]))
