"""Actors beside the learner (``num_actors`` >= 2; docs/scale.md), as Ape-X and Sample Factory
arrange them: rollout workers in processes of their own, one learner, shared memory.
"""

from ellm.actors.collector import ActorCollector
from ellm.actors.learner import ActorLMCounters
from ellm.actors.messages import CHUNK_STEPS, Chunk
from ellm.actors.pool import ActorFailed, ActorPool, actor_seed, lm_budget_share

__all__ = ["CHUNK_STEPS", "ActorCollector", "ActorFailed", "ActorLMCounters", "ActorPool", "Chunk",
           "actor_seed", "lm_budget_share"]
