"""ELLM's goal reward as a table (ELLM.md §4): phrases and goals are finite, so GoalReward's
similarities are computed once and the loop's reward is a gather."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ellm.games.craftax.game import PHRASES, SYNONYMS
from ellm.games.craftax.goals import GOALS
from ellm.reward import GoalReward


def reward_table(embedder, threshold: float) -> np.ndarray:
    """float32[PHRASES, GOALS]: what a transition of each phrase earns for each goal shown, 0
    below the threshold; the same numbers :class:`GoalReward` gives one goal at a time."""
    score = GoalReward(embedder, threshold, synonyms=SYNONYMS)
    return np.array([[score(phrase, [goal])[0] for goal in GOALS] for phrase in PHRASES],
                    np.float32)


def goal_reward(table: jax.Array, phrase: jax.Array, shown: jax.Array
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(reward, matched goal, matched?): the best of the shown goals, as GoalReward's."""
    row = jnp.where(phrase >= 0, table[jnp.maximum(phrase, 0)], 0.0)
    scores = jnp.where(shown, row, 0.0)
    best = jnp.argmax(scores)
    value = scores[best]
    return value, best, value > 0
