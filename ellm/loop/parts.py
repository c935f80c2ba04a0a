"""The pieces of a run built from its config, shared by the workspace and the actors."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from ellm.agent.frames import FRAME_SIZE, paper_gray84, to_gray84
from ellm.agent.inputs import AgentInputs
from ellm.games import Game
from ellm.goals import Goals
from ellm.lm import LMSpec
from ellm.loop.rollout import Rollout
from ellm.method import Method
from ellm.reward import GameReward, StepReward
from ellm.run import checkpoint
from ellm.run.config import agent_target

log = logging.getLogger(__name__)


@dataclass
class RolloutParts:
    """What a training rollout is made of; ``env`` and ``goals`` are None when actors collect."""

    env: Any
    goals: Goals | None
    rewards: list[StepReward]
    inputs: AgentInputs
    embedder: Any
    covered: Callable[[Mapping[str, Any]], Iterable[Hashable]]

    def rollout(self, frame_stack: int) -> Rollout:
        assert self.env is not None and self.goals is not None, "built without an env"
        return Rollout(self.env, self.goals, self.rewards, self.inputs, frame_stack,
                       self.covered)


def rollout_parts(cfg: DictConfig, game: Game, method: Method, lm: LMSpec,
                  device: torch.device, env_seed: int | None) -> RolloutParts:
    """The env, agent inputs, embedder, goal source (asking ``lm``) and per-step rewards of one
    rollout."""
    env = game.make_env(cfg, env_seed) if env_seed is not None else None
    inputs = AgentInputs(cfg.use_language_state is not None, cfg.use_goal,
                         functools.partial(game.goal_text, cfg),
                         paper_gray84 if game.paper_setting(cfg) else to_gray84)
    embedder = None
    if (cfg.use_goal or cfg.use_language_state is not None
            or (method.goal_reward and game.needs_embedder(cfg))):
        from ellm.embed import SentenceEmbedder

        embedder = SentenceEmbedder(cfg.sbert_model, device=str(device))
    if env is None:
        return RolloutParts(None, None, [], inputs, embedder, game.covered)
    goals, rewards = goal_source(cfg, game, method, lm, embedder)
    return RolloutParts(env, goals, [*rewards, *game_reward(cfg, method)], inputs, embedder,
                        game.covered)


def goal_source(cfg: DictConfig, game: Game, method: Method, lm: LMSpec,
                embedder: Any) -> tuple[Goals, list[StepReward]]:
    """A rollout's goal source and the per-step rewards every rollout of the run sums: the
    game's goal reward (when the method learns from it), then the method's own."""
    goals, rewards = game.goals(cfg, lm, embedder, method.goal_reward)
    return goals, [*rewards, *method.rewards(cfg)]


def game_reward(cfg: DictConfig, method: Method) -> list[StepReward]:
    """The game reward among the training rollout's per-step rewards, when the method uses it
    (evaluation reports the game's reward apart)."""
    weight = method.game_weight(cfg)
    return [] if weight is None else [GameReward(weight)]


def make_agent(cfg: DictConfig, *, options: Any, num_actions: int, device: torch.device,
               embedder: Any, strings: Any, hold_epsilon: bool, seed: int, paper: bool) -> Any:
    """The agent ``cfg.agent`` names (``strings`` None for an agent that only acts)."""
    return hydra.utils.get_class(agent_target(cfg))(
        agent_options=options, obs_shape=(cfg.frame_stack, FRAME_SIZE, FRAME_SIZE),
        num_actions=num_actions, device=str(device),
        embedder=embedder, strings=strings, discount=cfg.discount,
        nstep=cfg.nstep, hold_epsilon=hold_epsilon, seed=seed,
        use_extr_rew=cfg.use_extr_rew, paper_setting=paper,
        max_text_tokens=cfg.env_spec.max_seq_len,
        precision=cfg.precision if strings is not None else "fp32",
        compile=cfg.compile if strings is not None else False)


def add_guide(agent: Any, cfg: DictConfig, **kwargs: Any) -> None:
    """Guided exploration: ``expl_agent_path``'s agent guides ``agent``'s exploration."""
    if not cfg.expl_agent_path:
        return
    guide = make_agent(cfg, hold_epsilon=False, **kwargs)
    guide.load_weights(checkpoint.load(cfg.expl_agent_path, "expl_agent_path")[0])
    agent.set_exploration_agent(guide)
    log.info("guided exploration from %s (other_model_prob=%s)", cfg.expl_agent_path,
             cfg.other_model_prob)


__all__ = ["RolloutParts", "add_guide", "game_reward", "goal_source", "make_agent",
           "rollout_parts"]
