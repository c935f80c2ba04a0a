"""The main process's side of the actors: start them, take their chunks, notice their faults,
stop them.

:class:`ActorPool` is a context manager: entering spawns the actor processes (their pids go to
the log), leaving stops them (the stop event, then a join while their queue is drained, then
SIGTERM for any that did not stop in time), whatever ended the run: its end, an actor's
failure, Ctrl-C. :meth:`ActorPool.receive` returns the next chunk; an actor that raised, or
died, stops the run with :class:`ActorFailed` naming it.
"""

from __future__ import annotations

import logging
import os
import queue as queues
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

import numpy as np
import torch.multiprocessing as mp
from omegaconf import DictConfig, OmegaConf

from ellm.actors.messages import CHUNK_STEPS, ActorError, Chunk
from ellm.actors.shared import Shared, SharedPolicy
from ellm.actors.worker import ActorSpec, actor_main
from ellm.lm.watch import signal_name

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 30.0  # an actor's time to stop (it may be in an env step or an LM request)


class ActorFailed(RuntimeError):
    """An actor raised or died: the run stops."""


def actor_seed(seed: int, index: int) -> int:
    """Actor ``index``'s env seed: drawn from (``seed``, ``index``), so the actors of a run,
    and the runs of a sweep, have worlds of their own."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0] % 2**31)


def lm_budget_share(cfg: DictConfig, parts: int) -> DictConfig:
    """``cfg`` with ``env_spec.lm_spec.budget`` divided by ``parts``: every process holds its
    own budget ledger, so each gets an equal share and the run never spends more in all."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    out.env_spec.lm_spec.budget = float(cfg.env_spec.lm_spec.budget) / parts
    return out


class ActorPool:
    """``num_actors`` actor processes (see the module docstring). ``state`` is the learner's
    ``state_dict()``; ``frame``/``decay_from`` the run's counters at start; ``env_episodes``
    each actor's env resets before (a resumed run)."""

    def __init__(self, cfg: DictConfig, num_actors: int, state: Mapping[str, Any], *,
                 frame: int, decay_from: int | None, env_episodes: Sequence[int] = (),
                 target: Callable[..., None] = actor_main):
        self.context = mp.get_context("spawn")
        self.num_actors, self.target = num_actors, target
        self.policy = SharedPolicy(self.context, state)
        self.shared = Shared(self.context, num_actors, frame, decay_from)
        self.queue = self.context.Queue()
        config = OmegaConf.to_container(lm_budget_share(cfg, num_actors + 1), resolve=True)
        episodes = list(env_episodes) + [0] * num_actors
        self.specs = [ActorSpec(i, config, actor_seed(cfg.seed, i),
                                int(np.random.SeedSequence([cfg.seed, i, frame]).generate_state(1)[0]),
                                episodes[i], os.getpid(), 2 * CHUNK_STEPS)
                      for i in range(num_actors)]
        self.processes: list[Any] = []

    def __enter__(self) -> Self:
        for spec in self.specs:
            process = self.context.Process(
                target=self.target, args=(spec, self.policy, self.shared, self.queue),
                name=f"ellm-actor-{spec.index}", daemon=True)
            process.start()
            self.processes.append(process)
            log.info("actor %d started: pid %d (env seed %d)", spec.index, process.pid,
                     spec.env_seed)
        return self

    def __exit__(self, *exc: object) -> None:
        self.shared.stop.set()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while any(p.is_alive() for p in self.processes) and time.monotonic() < deadline:
            self._drain(0.05)
        for process in self.processes:
            if process.is_alive():
                log.warning("actor %s (pid %d) did not stop in %.0f s: terminating it",
                            process.name, process.pid, JOIN_TIMEOUT_S)
                process.terminate()
            process.join()
        self.queue.close()
        self.queue.cancel_join_thread()

    def _drain(self, timeout: float) -> None:
        try:
            self.queue.get(timeout=timeout)
        except queues.Empty:
            pass

    # ------------------------------------------------------------------ the learner's side
    def receive(self, poll_s: float = 1.0) -> Chunk:
        """The next chunk of any actor; :class:`ActorFailed` if one raised or died."""
        while True:
            self._check_alive()
            try:
                message = self.queue.get(timeout=poll_s)
            except queues.Empty:
                continue
            if isinstance(message, ActorError):
                raise self._failed(message)
            return message

    def took(self, actor: int, frames: int, run_frame: int, decay_from: int | None) -> None:
        """The learner took ``frames`` of ``actor``'s; the run is at ``run_frame``, and its
        epsilon decays from ``decay_from`` once the rewards reached 1 (decay_after_reward)."""
        self.shared.taken[actor] += frames
        self.shared.frame.value = run_frame
        if decay_from is not None:
            self.shared.decay_from.value = decay_from

    def publish(self, state: Mapping[str, Any]) -> None:
        self.policy.publish(state)

    def _check_alive(self) -> None:
        for index, process in enumerate(self.processes):
            code = process.exitcode
            if code is None:
                continue
            # An actor that raised exits with 1 after sending its traceback: report that.
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                try:
                    message = self.queue.get(timeout=0.1)
                except queues.Empty:
                    continue
                if isinstance(message, ActorError):
                    raise self._failed(message)
            how = (f"was killed by {signal_name(-code)}" if code < 0
                   else f"exited with code {code}")
            log.error("actor %d (pid %d) %s: the run stops", index, process.pid, how)
            raise ActorFailed(f"actor {index} (pid {process.pid}) {how}")

    def _failed(self, error: ActorError) -> ActorFailed:
        log.error("actor %d (pid %d) failed; the run stops. Its traceback:\n%s", error.actor,
                  error.pid, error.traceback.rstrip())
        last = error.traceback.strip().splitlines()[-1]
        return ActorFailed(f"actor {error.actor} (pid {error.pid}) failed: {last}")


__all__ = ["ActorFailed", "ActorPool", "actor_seed", "lm_budget_share"]
