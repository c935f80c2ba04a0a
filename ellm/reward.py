"""The reward seam and the rewards every game shares (ELLM.md §4).

Every reward an agent learns from is a plug-in of one protocol, :class:`Reward`; whether it is
computed per step at collection (:class:`StepReward`) or per batch at update
(:class:`BatchReward`) is a property of the plug-in. Here: :class:`GameReward` (the game's own
reward, with a weight) and :class:`GoalReward`, the scoring ELLM's goal reward rests on: the
cosine similarity between the SBERT embedding of a step's transition caption and the
embeddings of the goals suggested at the *previous* step, if above ``threshold`` (0.99), else 0.
The reward is the cosine itself (about 0.99-1.0). A caption is also compared under the game's
synonym for it ("attack cow" for "eat cow"), so a goal phrased either way is achieved by the one
game action. Each game wires them to its captions in its folder under :mod:`ellm.games`; the
exploration baselines' rewards are in :mod:`baselines`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

__all__ = ["BatchReward", "GameReward", "GoalReward", "Reward", "StepData", "StepReward"]


# ---------------------------------------------------------------------------- the reward seam
class Reward(Protocol):
    """A reward an agent learns from: ELLM's goal reward, a single task's, the game reward,
    RND, NovelD or APT. ``per_step`` says when it is computed, and so which of the two
    sub-protocols a plug-in implements:

    - :class:`StepReward` (``per_step`` True): at collection, one value per env step; the
      loop sums a run's per-step rewards into the replay's ``reward``, which reaches the learner
      as each sampled transition's n-step return (clipped as the config says);
    - :class:`BatchReward` (``per_step`` False): at update, from the sampled transitions; the
      agent adds its n-step return to the batch's ``reward`` before the TD step, then lets the
      plug-in learn from the batch.
    """

    name: str  # prefix of its metrics
    per_step: bool


class StepData(NamedTuple):
    """The step a per-step reward scores."""

    action: int
    game_reward: float
    info: Mapping[str, Any]  # the env step's info
    goals: Sequence[str]  # the goals shown to the agent when it acted


class StepReward(Reward, Protocol):
    """A reward computed at collection (``per_step`` True)."""

    def reset(self) -> None:
        """A new episode starts."""

    def step(self, data: StepData) -> float:
        """The reward of the step just taken."""

    def episode_metrics(self) -> dict[str, float]:
        """Its metrics of the episode so far (e.g. how many steps achieved a goal)."""


class GameReward:
    """The game's own reward, as a per-step reward with a weight (the extrinsic baseline and
    random actions learn from it alone; ``use_extr_rew=True`` adds it to another reward)."""

    name = "game"
    per_step = True

    def __init__(self, weight: float = 1.0):
        self.weight = float(weight)

    def reset(self) -> None:
        pass

    def step(self, data: StepData) -> float:
        return data.game_reward if self.weight == 1.0 else self.weight * data.game_reward

    def episode_metrics(self) -> dict[str, float]:
        return {}


class BatchReward(Reward, Protocol):
    """A reward computed at update (``per_step`` False)."""

    def compute(self, batch: Any) -> tuple[Any, dict[str, Any]]:
        """The n-step return of each sampled transition (a [B] tensor on the agent's device,
        no gradients) and metrics kept on the device (tensors) or plain floats."""

    def update(self, batch: Any) -> dict[str, Any]:
        """Learn from the batch (e.g. one gradient step of a predictor); its losses, as
        ``compute``'s metrics (0-d tensors kept on the device, or floats)."""

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
        self.synonyms = dict(synonyms or {})  # the game's: caption -> the same action's other name

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


