"""Actors beside the learner (``num_actors`` >= 2; docs/scale.md), as Ape-X and Sample Factory
arrange them: rollout workers in processes of their own, one learner, shared memory.

- :mod:`.worker`: an actor process runs the run's one rollout on its own env with a CPU copy
  of the policy and ships finished steps in chunks;
- :mod:`.shared`: the policy's weights in shared memory with a version number, the counters
  that throttle the actors;
- :mod:`.pool`: the main process starts, feeds from and stops the actors, and stops the run
  naming an actor that raised or died;
- :mod:`.collector`: the training loop takes the chunks' steps one at a time, as it takes
  its own rollout's (:mod:`ellm.collect`);
- :mod:`.learner`: the actors' LM counters, pooled with the learner's.
"""

from ellm.actors.collector import ActorCollector
from ellm.actors.learner import ActorLMCounters
from ellm.actors.messages import CHUNK_STEPS, Chunk
from ellm.actors.pool import ActorFailed, ActorPool, actor_seed, lm_budget_share

__all__ = ["CHUNK_STEPS", "ActorCollector", "ActorFailed", "ActorLMCounters", "ActorPool", "Chunk",
           "actor_seed", "lm_budget_share"]
