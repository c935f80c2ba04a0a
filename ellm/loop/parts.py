"""The pieces of a run built from its parsed config, shared by the workspace and the actors."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import hydra
import torch

from ellm.agent.frames import FRAME_SIZE, paper_gray84, to_gray84
from ellm.agent.inputs import AgentInputs
from ellm.goals import Goals
from ellm.loop.rollout import Rollout
from ellm.reward import GameReward, StepReward
from ellm.run import checkpoint
from ellm.run.config import RunSpec

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


def rollout_parts(spec: RunSpec, device: torch.device, env_seed: int | None) -> RolloutParts:
    """The env, agent inputs, embedder, goal source (asking ``spec.lm``) and per-step rewards of
    one rollout."""
    game, method, agent = spec.game, spec.method, spec.agent
    env = game.make_env(spec, env_seed) if env_seed is not None else None
    inputs = AgentInputs(agent.use_language_state is not None, agent.use_goal,
                         functools.partial(game.goal_text, spec),
                         paper_gray84 if game.paper_setting(spec.env.name) else to_gray84)
    embedder = None
    if (agent.use_goal or agent.use_language_state is not None
            or (method.goal_reward and game.needs_embedder(spec))):
        from ellm.embed import SentenceEmbedder

        embedder = SentenceEmbedder(spec.run.sbert_model, device=str(device))
    if env is None:
        return RolloutParts(None, None, [], inputs, embedder, game.covered)
    goals, rewards = goal_source(spec, embedder)
    return RolloutParts(env, goals, [*rewards, *game_reward(spec)], inputs, embedder,
                        game.covered)


def goal_source(spec: RunSpec, embedder: Any) -> tuple[Goals, list[StepReward]]:
    """A rollout's goal source and the per-step rewards every rollout of the run sums: the
    game's goal reward (when the method learns from it), then the method's own."""
    goals, rewards = spec.game.goals(spec, embedder, spec.method.goal_reward)
    return goals, [*rewards, *spec.method.rewards(spec)]


def game_reward(spec: RunSpec) -> list[StepReward]:
    """The game reward among the training rollout's per-step rewards, when the method uses it
    (evaluation reports the game's reward apart)."""
    weight = spec.method.game_weight(spec.run.use_extr_rew, spec.agent)
    return [] if weight is None else [GameReward(weight)]


def make_agent(spec: RunSpec, *, num_actions: int, device: torch.device, embedder: Any,
               strings: Any, hold_epsilon: bool, seed: int) -> Any:
    """The agent ``spec.agent_class`` names (``strings`` None for an agent that only acts)."""
    run, paper = spec.run, spec.game.paper_setting(spec.env.name)
    return hydra.utils.get_class(spec.agent_class)(
        agent_options=spec.agent, obs_shape=(run.frame_stack, FRAME_SIZE, FRAME_SIZE),
        num_actions=num_actions, device=str(device),
        embedder=embedder, strings=strings, discount=run.discount,
        nstep=run.nstep, hold_epsilon=hold_epsilon, seed=seed,
        use_extr_rew=run.use_extr_rew, paper_setting=paper,
        max_text_tokens=spec.env.max_seq_len,
        precision=run.precision if strings is not None else "fp32",
        compile=run.compile if strings is not None else False)


def add_guide(agent: Any, spec: RunSpec, **kwargs: Any) -> None:
    """Guided exploration: ``expl_agent_path``'s agent guides ``agent``'s exploration."""
    path = spec.run.expl_agent_path
    if not path:
        return
    guide = make_agent(spec, hold_epsilon=False, **kwargs)
    guide.load_weights(checkpoint.load(path, "expl_agent_path")[0])
    agent.set_exploration_agent(guide)
    log.info("guided exploration from %s (other_model_prob=%s)", path,
             spec.agent.other_model_prob)


__all__ = ["RolloutParts", "add_guide", "game_reward", "goal_source", "make_agent",
           "rollout_parts"]
