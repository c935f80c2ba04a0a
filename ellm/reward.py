"""The reward seam and the rewards every game shares (ELLM.md §4).

GoalReward scores a step's transition caption (and its game synonym) against the goals of the
*previous* step: the cosine of their SBERT embeddings if above ``threshold``, else 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

__all__ = ["BatchReward", "GameReward", "GoalReward", "Reward", "Scored", "StepData",
           "StepReward"]


class Reward(Protocol):
    """A reward an agent learns from: per step (stored in the replay) or per sampled batch."""

    name: str
    per_step: bool


class StepData(NamedTuple):
    """The step a per-step reward scores."""

    action: int
    game_reward: float
    info: Mapping[str, Any]
    goals: Sequence[str]


class Scored(NamedTuple):
    """A per-step reward's value, and the goal the step achieved: the rollout hands it to the
    goal source, which retires it (a reward never calls the goal source)."""

    value: float
    achieved: str | None = None


class StepReward(Reward, Protocol):
    """A reward computed at collection (``per_step`` True)."""

    def reset(self) -> None:
        """A new episode starts."""

    def step(self, data: StepData) -> Scored:
        """The reward of the step just taken."""

    def episode_metrics(self) -> dict[str, float]:
        """Its metrics of the episode so far (e.g. how many steps achieved a goal)."""


class GameReward:
    """The game's own reward with a weight (the extrinsic baseline's and random actions')."""

    name = "game"
    per_step = True

    def __init__(self, weight: float = 1.0):
        self.weight = float(weight)

    def reset(self) -> None:
        pass

    def step(self, data: StepData) -> Scored:
        return Scored(data.game_reward if self.weight == 1.0 else self.weight * data.game_reward)

    def episode_metrics(self) -> dict[str, float]:
        return {}


class BatchReward(Reward, Protocol):
    """A reward computed at update (``per_step`` False)."""

    def compute(self, batch: Any) -> tuple[Any, dict[str, Any]]:
        """The n-step return of each sampled transition ([B], no gradients) and metrics."""

    def update(self, batch: Any) -> dict[str, Any]:
        """Learn from the batch; its losses as ``compute``'s metrics."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class GoalReward:
    """Cosine reward between a transition caption and the previous step's goals."""

    def __init__(self, embedder: Embedder, threshold: float = 0.99,
                 synonyms: Mapping[str, str] | None = None):
        self.embedder = embedder
        self.threshold = threshold
        self.synonyms = dict(synonyms or {})

    def __call__(self, caption: str, goals: Sequence[str]) -> tuple[float, str | None]:
        """(reward, matched goal or None)."""
        if not caption or not goals:
            return 0.0, None
        captions = [caption] + ([self.synonyms[caption]] if caption in self.synonyms else [])
        cap = self.embedder.embed(captions)
        emb = self.embedder.embed(list(goals))
        sims = (emb @ cap.T).max(axis=1)
        best = int(np.argmax(sims))
        score = float(sims[best])
        if score > self.threshold:
            return score, goals[best]
        return 0.0, None


