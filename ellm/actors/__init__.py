"""Actors beside the learner (``num_actors`` >= 2; docs/scale.md), as Ape-X and Sample Factory
arrange them: rollout workers in processes of their own, one learner, shared memory.

- :mod:`.worker`: an actor process runs the run's one rollout on its own env with a CPU copy
  of the policy and ships finished steps in chunks;
- :mod:`.shared`: the policy's weights in shared memory with a version number, the counters
  that throttle the actors;
- :mod:`.pool`: the main process starts, feeds from and stops the actors, and stops the run
  naming an actor that raised or died;
- :mod:`.learner`: the main process keeps each actor's open episode and writes it to the
  replay, whose only writer it is.
"""

from ellm.actors.learner import ActorGoals, OpenEpisodes, lm_counts_on, pool_lm_metrics
from ellm.actors.messages import CHUNK_STEPS, Chunk, EpisodeEnd
from ellm.actors.pool import ActorFailed, ActorPool, actor_seed, lm_budget_share

__all__ = ["CHUNK_STEPS", "ActorFailed", "ActorGoals", "ActorPool", "Chunk", "EpisodeEnd",
           "OpenEpisodes", "actor_seed", "lm_budget_share", "lm_counts_on", "pool_lm_metrics"]
