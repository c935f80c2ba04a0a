"""Goals without waiting (``env_spec.lm_spec.blocking=false``, docs/lm.md).

A miss is asked in the background and the step gets the goals of this episode's latest answered
state: the agent moves one tile a step, so they are the best guess, and never invented.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ellm.lm.gpt import GoalPrompt, GPTLanguageModel
from lmclient.cache import CachedAnswer
from lmclient.client import ConstraintRefused, LMClient, Prompt

log = logging.getLogger("ellm.lm")

# Requests in flight in this process: suggesters never send the same prompt twice at once.
_IN_FLIGHT: set[tuple[str, str]] = set()
_IN_FLIGHT_LOCK = threading.Lock()
FALLBACK_WARN_SHARE = 0.10


def fallback_warning(counts: Mapping[str, float]) -> str | None:
    """What to change when too many queries got fallback goals, else None."""
    queries, fallback = counts.get("queries", 0.0), counts.get("fallback_steps", 0.0)
    if not queries or fallback / queries <= FALLBACK_WARN_SHARE:
        return None
    return (f"{fallback / queries:.0%} of the LM queries ({fallback:.0f} of {queries:.0f}) got "
            "fallback goals: the server answered too slowly for this run. Serve more requests "
            "at once (python -m ellm_tools.serve --parallel N, with "
            "env_spec.lm_spec.max_in_flight=N) or use a faster server (docs/lm.md)")


class NonBlockingLanguageModel(GPTLanguageModel):
    """``GPTLanguageModel`` whose cache misses are asked in the background (docs/lm.md)."""

    def __init__(self, client: LMClient, prompt: GoalPrompt, *,
                 novelty_bonus: bool = True, max_num_goals: int | None = None,
                 max_in_flight: int = 4, synonyms: Mapping[str, str] | None = None,
                 goal_vocabulary: Sequence[str] | None = None) -> None:
        super().__init__(client, prompt, novelty_bonus=novelty_bonus,
                         max_num_goals=max_num_goals, synonyms=synonyms,
                         goal_vocabulary=goal_vocabulary)
        self.max_in_flight = max_in_flight
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[CachedAnswer | None]] = {}
        self._stop = threading.Event()
        self._recent: list[str] = []
        self.wait_seconds = 0.0
        self.fallback_steps = 0
        self.pool_full = 0

    def __repr__(self) -> str:
        return f"NonBlockingLanguageModel({self.client!r}, max_in_flight={self.max_in_flight})"

    def reset(self) -> None:
        super().reset()
        self._recent = []

    @property
    def in_flight(self) -> int:
        return sum(not future.done() for future in self._pending.values())

    def raw_goals(self, state: Any) -> list[str]:
        """The cached answer's goals, else the fallback goals (the miss is asked meanwhile)."""
        start = time.monotonic()
        try:
            self._collect()
            request, params = self.request(state), self.client.text_params(self.constraint)
            key = self.client.request_key(request, params)
            self.client.count(queries=1)
            cached = self.client.lookup(key)
            if cached is not None:
                goals = self.parse(self.client.checked(cached.text, self.constraint, params))
                if goals:
                    self._recent = goals
                return goals
            self._send(key, request, params)
            self.fallback_steps += 1
            return list(self._recent)
        finally:
            self.wait_seconds += time.monotonic() - start

    def metrics(self) -> dict[str, float]:
        return {**self.client.metrics(), "wait_seconds": self.wait_seconds,
                "fallback_steps": float(self.fallback_steps),
                "in_flight": float(self.in_flight), "pool_full": float(self.pool_full)}

    def close(self) -> None:
        """Let requests in flight finish their attempt (no retry), then stop the pool."""
        if self._pool is None:
            return
        start = time.monotonic()
        self._stop.set()
        self._pool.shutdown(wait=True)
        self._pool = None
        self.wait_seconds += time.monotonic() - start
        for future in self._pending.values():
            error = future.exception()
            if error is not None:
                log.error("an LM request failed as the run ended: %s: %s",
                          type(error).__name__, error)
        self._pending.clear()

    def _send(self, key: str, request: Prompt, params: dict[str, Any]) -> None:
        """Ask ``request`` in the background unless under way, out of budget or the pool is full."""
        slot = (self.client.spec.base_url or "openai", key)
        if key in self._pending or slot in _IN_FLIGHT:
            return
        if not self.client.may_send():
            return
        if len(self._pending) >= self.max_in_flight:
            self.pool_full += 1
            return
        with _IN_FLIGHT_LOCK:
            if slot in _IN_FLIGHT:
                return
            _IN_FLIGHT.add(slot)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_in_flight,
                                            thread_name_prefix="ellm-lm")
            self._stop = threading.Event()
        self._pending[key] = self._pool.submit(self._fetch, slot, request, params)

    def _fetch(self, slot: tuple[str, str], request: Prompt,
               params: dict[str, Any]) -> CachedAnswer | None:
        """Worker thread: the answer is cached before the slot is freed."""
        try:
            return self.client.fetch(slot[1], request, params, stop=self._stop)
        except ConstraintRefused:
            return None
        finally:
            with _IN_FLIGHT_LOCK:
                _IN_FLIGHT.discard(slot)

    def _collect(self) -> None:
        """Forget finished requests; a worker's exception (e.g. LMConfigError) is raised here."""
        for key, future in list(self._pending.items()):
            if future.done():
                del self._pending[key]
                future.result()
