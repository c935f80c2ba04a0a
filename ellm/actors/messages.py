"""What an actor sends the main process: finished steps in chunks, and its error if it fails.

Texts travel as strings: the main process alone owns the string ids and the replay files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from ellm.agent.inputs import AgentInputs
from ellm.agent.text_embeddings import ShippedEmbeddings
from ellm.loop.collect import Collected, EpisodeEnd, row_of, start_of
from ellm.loop.rollout import Rollout, Step
from ellm.replay import EpisodeStart, Row

CHUNK_STEPS: Final = 64


@dataclass
class Chunk:
    """Consecutive steps of one actor's episode."""

    actor: int
    start: EpisodeStart | None
    rows: list[Row]
    end: EpisodeEnd | None
    env_episodes: int | None
    embeddings: ShippedEmbeddings | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def collected(self, j: int) -> Collected:
        """Its ``j``-th step as the loop takes it."""
        row = self.rows[j]
        return Collected(row, self.actor, self.start if j == 0 else None,
                         self.end if row.last else None)


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
        self._rows: list[Row] = []

    def start(self, frame: np.ndarray, rollout: Rollout) -> None:
        self._start = start_of(frame, rollout)

    def add(self, step: Step) -> None:
        self._rows.append(row_of(step, self.inputs))

    def __len__(self) -> int:
        return len(self._rows)

    def take(self, end: EpisodeEnd | None, env_episodes: int | None,
             embeddings: ShippedEmbeddings | None = None) -> Chunk:
        rows, self._rows = self._rows, []
        start, self._start = self._start, None
        return Chunk(self.actor, start, rows, end, env_episodes, embeddings)


__all__ = ["CHUNK_STEPS", "ActorError", "Chunk", "ChunkWriter"]
