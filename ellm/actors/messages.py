"""What an actor sends the main process: finished steps in chunks, and its error if it fails.

A :class:`Chunk` holds up to :data:`CHUNK_STEPS` consecutive steps of one episode, the
episode's reset observation when the chunk opens it and, when the chunk closes it, the
:class:`EpisodeEnd` the logger needs. Frames travel as uint8 arrays and texts as strings: the
main process alone turns them into replay files and string ids. A chunk also carries the text
embeddings the actor computed to act, so that the learner does not encode them again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ellm.inputs import AgentInputs
from ellm.rollout import Rollout, Step
from ellm.text_input import ShippedEmbeddings
from ellm.timing import Timer

CHUNK_STEPS: Final = 64  # steps per chunk at most (an episode's end closes one sooner)


@dataclass(frozen=True)
class EpisodeStart:
    """An episode's reset observation."""

    frame: np.ndarray  # uint8 [H, W]
    text: str
    goal: str


@dataclass(frozen=True)
class EpisodeEnd:
    """What the logger needs of a finished episode, as :meth:`of` takes it from the rollout."""

    summary: dict[str, float]  # Rollout.summary()
    stats: dict[str, Any]  # the game's episode stats (info["episode_stats"])
    reward_metrics: list[str]  # the per-step rewards' episode metrics (keys of summary)
    times: dict[str, float]  # each timed section's share of the episode's wall time
    fps: float  # the episode's frames per second
    lm: dict[str, float] = field(default_factory=dict)  # its goal source's lm/ counters

    @classmethod
    def of(cls, rollout: Rollout, info: Any, timer: Timer, lm: dict[str, float] | None = None
           ) -> EpisodeEnd:
        summary = rollout.summary()
        return cls(summary, dict(info["episode_stats"]),
                   [k for r in rollout.rewards for k in r.episode_metrics()],
                   timer.fractions(), summary["length"] / timer.elapsed(), dict(lm or {}))


@dataclass
class Chunk:
    """Consecutive steps of one actor's episode (see the module docstring)."""

    actor: int
    start: EpisodeStart | None
    frames: np.ndarray  # uint8 [k, H, W]
    actions: np.ndarray  # int64 [k]
    rewards: np.ndarray  # float64 [k]: the summed per-step rewards the replay stores
    discounts: np.ndarray  # float64 [k]
    game_rewards: np.ndarray  # float64 [k]
    texts: list[str]
    goals: list[str]
    last: np.ndarray  # bool [k]
    end: EpisodeEnd | None
    env_episodes: int | None  # the actor env's resets so far (an EpisodeCounted env)
    embeddings: ShippedEmbeddings | None = None  # the text embeddings it computed meanwhile

    def __len__(self) -> int:
        return len(self.actions)


@dataclass(frozen=True)
class ActorError:
    """An actor's exception, sent before it exits."""

    actor: int
    pid: int
    traceback: str


class ChunkWriter:
    """Collects an actor's steps into :class:`Chunk` s."""

    def __init__(self, actor: int, inputs: AgentInputs):
        self.actor, self.inputs = actor, inputs
        self._start: EpisodeStart | None = None
        self._steps: list[Step] = []

    def start(self, frame: np.ndarray, rollout: Rollout) -> None:
        self._start = EpisodeStart(frame, self.inputs.text(rollout.obs),
                                   self.inputs.goal(rollout.goals))

    def add(self, step: Step) -> None:
        self._steps.append(step)

    def __len__(self) -> int:
        return len(self._steps)

    def take(self, end: EpisodeEnd | None, env_episodes: int | None,
             embeddings: ShippedEmbeddings | None = None) -> Chunk:
        steps, self._steps = self._steps, []
        start, self._start = self._start, None
        return Chunk(
            self.actor, start, np.stack([s.frame for s in steps]),
            np.array([s.action for s in steps], dtype=np.int64),
            np.array([s.reward for s in steps], dtype=np.float64),
            np.array([s.info["discount"] for s in steps], dtype=np.float64),
            np.array([s.game_reward for s in steps], dtype=np.float64),
            [self.inputs.text(s.obs) for s in steps], [self.inputs.goal(s.goals) for s in steps],
            np.array([s.last for s in steps], dtype=bool), end, env_episodes, embeddings)


__all__ = ["CHUNK_STEPS", "ActorError", "Chunk", "ChunkWriter", "EpisodeEnd", "EpisodeStart"]
