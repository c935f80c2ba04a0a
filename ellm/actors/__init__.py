"""Actors beside the learner (``num_actors`` >= 2; docs/scale.md), as Ape-X and Sample Factory
arrange them: rollout workers in processes of their own, one learner, shared memory.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ellm.actors.collector import ActorCollector
    from ellm.actors.lm_counters import ActorLMCounters
    from ellm.actors.messages import CHUNK_STEPS, Chunk
    from ellm.actors.pool import ActorFailed, ActorPool, actor_seed, lm_budget_share

__all__ = ["CHUNK_STEPS", "ActorCollector", "ActorFailed", "ActorLMCounters", "ActorPool", "Chunk",
           "actor_seed", "lm_budget_share"]

# Loaded on first use: the LLM server imports the process helpers (.watch) without torch.
_HOMES = {"ActorCollector": "collector", "ActorLMCounters": "lm_counters", "CHUNK_STEPS": "messages",
          "Chunk": "messages", "ActorFailed": "pool", "ActorPool": "pool", "actor_seed": "pool",
          "lm_budget_share": "pool"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"ellm.actors.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
