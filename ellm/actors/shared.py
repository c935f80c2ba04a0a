"""The policy's weights (overwritten in place, versioned) and counters the actors share."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

STARTING, RUNNING, ENDING = 0, 1, 2


def _share(state: Any) -> Any:
    """A copy of ``state`` whose tensors live in shared memory (other values as they are)."""
    if isinstance(state, Mapping):
        return {k: _share(v) for k, v in state.items()}
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True).share_memory_()
    return state


def _copy_into(shared: Any, state: Any) -> None:
    if isinstance(shared, dict):
        for key, value in shared.items():
            _copy_into(value, state[key])
    elif isinstance(shared, torch.Tensor):
        shared.copy_(state.detach())


class SharedPolicy:
    """The learner's weights for the actors (see the module docstring)."""

    def __init__(self, context: Any, state: Mapping[str, Any]):
        self.state = _share(state)
        self.version = context.Value("q", 1, lock=False)
        self.lock = context.Lock()

    def publish(self, state: Mapping[str, Any], waiting: Callable[[], None]) -> None:
        """Learner: overwrite the shared weights; ``waiting`` raises if a dead actor holds the lock."""
        while not self.lock.acquire(timeout=1.0):
            waiting()
        try:
            _copy_into(self.state, state)
            self.version.value += 1
        finally:
            self.lock.release()

    def refresh(self, agent: Any, seen: int, stop: Flag | None = None) -> int:
        """Actor: load the shared weights into ``agent`` if they changed; returns the version held.
        It gives up, keeping ``seen``, once ``stop`` is set."""
        if self.version.value == seen:
            return seen
        while not self.lock.acquire(timeout=0.05):
            if stop is not None and stop.is_set():
                return seen
        try:
            agent.load_policy(self.state)
            return int(self.version.value)
        finally:
            self.lock.release()


class Flag:
    """An event without a lock (``multiprocessing.Event`` reads under one): an actor killed
    reading it leaves nothing held that would block the learner's ``set``."""

    def __init__(self, context: Any):
        self._value = context.Value("b", 0, lock=False)

    def set(self) -> None:
        self._value.value = 1

    def is_set(self) -> bool:
        return bool(self._value.value)


class Shared:
    """Counters and the stop flag of one pool of ``num_actors`` actors."""

    def __init__(self, context: Any, num_actors: int, frame: int, decay_from: int | None):
        self.frame = context.Value("q", frame, lock=False)
        self.decay_from = context.Value("q", -1 if decay_from is None else decay_from,
                                        lock=False)
        self.taken = context.Array("q", num_actors, lock=False)
        self.state = context.Array("b", num_actors, lock=False)
        # Held while leaving STARTING and while terminating a STARTING actor: no kill mid-handover.
        self.handover = context.Lock()
        self.stop = Flag(context)

    def enter(self, actor: int, state: int) -> None:
        """Actor: leave STARTING (a STARTING actor holds no other shared lock)."""
        with self.handover:
            self.state[actor] = state

    def wait_for_room(self, actor: int, produced: int, ahead: int) -> None:
        """Actor: block while ``ahead`` frames ahead of what the learner took from it."""
        while produced - self.taken[actor] >= ahead and not self.stop.is_set():
            time.sleep(0.002)


__all__ = ["ENDING", "RUNNING", "STARTING", "Flag", "Shared", "SharedPolicy"]
