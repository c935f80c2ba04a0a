"""The main process's side of the actors: start them, take their chunks, stop them."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, Self

import numpy as np
import torch
import torch.multiprocessing as mp
from omegaconf import OmegaConf

from ellm.actors.messages import CHUNK_STEPS, ActorError, Chunk
from ellm.actors.shared import STARTING, Shared, SharedPolicy
from ellm.actors.watch import signal_name
from ellm.actors.worker import ActorSpec, actor_main
from ellm.lm import LMSpec
from ellm.run.config import RunSpec

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 30.0


class ActorFailed(RuntimeError):
    """An actor raised or died: the run stops."""


def actor_seed(seed: int, index: int, *more: int) -> int:
    """Actor ``index``'s env seed (worlds of its own); with ``more``, a new action seed."""
    return int(np.random.SeedSequence([seed, index, *more]).generate_state(1)[0] % 2**31)


def lm_budget_share(lm: LMSpec, parts: int, spent: float = 0.0) -> LMSpec:
    """``lm`` with an equal share of the LM budget left: every process holds its own ledger."""
    return dataclasses.replace(lm, budget=max(0.0, lm.budget - spent) / parts)


def _log_file() -> str | None:
    """The file the run logs to (Hydra's ``train.log``), if any."""
    files = [h.baseFilename for h in logging.getLogger().handlers
             if isinstance(h, logging.FileHandler)]
    return files[0] if files else None


class ActorPool:
    """``num_actors`` actor processes, started from the learner's state and counters."""

    def __init__(self, run: RunSpec, num_actors: int, state: Mapping[str, Any], *,
                 frame: int, decay_from: int | None, env_episodes: Sequence[int] = (),
                 lm_spent: float = 0.0):
        self.context = mp.get_context("spawn")
        self.num_actors = num_actors
        self.policy = SharedPolicy(self.context, state)
        self.shared = Shared(self.context, num_actors, frame, decay_from)
        config = OmegaConf.create(OmegaConf.to_container(run.cfg, resolve=True))
        share = dataclasses.replace(run, lm=lm_budget_share(run.lm, num_actors + 1, lm_spent),
                                    cfg=config, device=torch.device("cpu"))
        episodes = list(env_episodes) + [0] * num_actors
        seed = run.run.seed
        self.specs = [ActorSpec(i, share, actor_seed(seed, i),
                                actor_seed(seed, i, frame), episodes[i], os.getpid(),
                                2 * CHUNK_STEPS, _log_file())
                      for i in range(num_actors)]
        self.processes: list[Any] = []
        self.pipes: list[Connection] = []
        self._ready: deque[int] = deque()

    def __enter__(self) -> Self:
        for spec in self.specs:
            receive, send = self.context.Pipe(duplex=False)
            process = self.context.Process(target=actor_main,
                                           args=(spec, self.policy, self.shared, send),
                                           name=f"ellm-actor-{spec.index}", daemon=True)
            process.start()
            send.close()  # the actor holds the only write end: its death is an end of file
            self.processes.append(process)
            self.pipes.append(receive)
            log.info("actor %d started: pid %d (env seed %d)", spec.index, process.pid,
                     spec.env_seed)
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop every actor; one still being built is terminated at once."""
        self.shared.stop.set()
        for index, process in enumerate(self.processes):
            # An actor killed holding the handover never releases it: the join below ends it.
            if not self.shared.handover.acquire(timeout=1.0):
                continue
            try:
                if self.shared.state[index] == STARTING and process.is_alive():
                    log.info("actor %d (pid %d) was still starting: terminated", index,
                             process.pid)
                    process.terminate()
                    process.join(timeout=JOIN_TIMEOUT_S)
            finally:
                self.shared.handover.release()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while any(p.is_alive() for p in self.processes) and time.monotonic() < deadline:
            for pipe in wait(self.pipes, timeout=0.05):
                try:
                    pipe.recv()
                except (EOFError, OSError):
                    self.pipes.remove(pipe)
        for process in self.processes:
            if process.is_alive():
                log.warning("actor %s (pid %d) did not stop in %.0f s: terminating it",
                            process.name, process.pid, JOIN_TIMEOUT_S)
                process.terminate()
            process.join()
        for pipe in self.pipes:
            pipe.close()

    def receive(self, poll_s: float = 1.0) -> Chunk:
        """The next chunk, the actors taking turns; ActorFailed if one raised or died."""
        while not self._ready:
            self._ready.extend(self.pipes.index(p) for p in wait(self.pipes, timeout=poll_s))
            if not self._ready:
                self._check_alive()
        actor = self._ready.popleft()
        try:
            message = self.pipes[actor].recv()
        except (EOFError, OSError):  # it closed its pipe: it exited, or was killed mid-write
            self.processes[actor].join(timeout=5.0)
            raise self._died(actor) from None
        if isinstance(message, ActorError):
            raise self._failed(message)
        return message

    def took(self, actor: int, frames: int, run_frame: int, decay_from: int | None) -> None:
        """The learner took ``frames`` of ``actor``'s (which throttles it)."""
        self.shared.taken[actor] += frames
        self.shared.frame.value = run_frame
        if decay_from is not None:
            self.shared.decay_from.value = decay_from

    def publish(self, state: Mapping[str, Any]) -> None:
        self.policy.publish(state, self._check_alive)

    def _check_alive(self) -> None:
        for index, process in enumerate(self.processes):
            if process.exitcode is not None:
                raise self._died(index)

    def _died(self, actor: int) -> ActorFailed:
        process = self.processes[actor]
        code = process.exitcode
        how = (f"was killed by {signal_name(-code)}" if code is not None and code < 0
               else f"exited with code {code}")
        log.error("actor %d (pid %d) %s: the run stops", actor, process.pid, how)
        return ActorFailed(f"actor {actor} (pid {process.pid}) {how}")

    def _failed(self, error: ActorError) -> ActorFailed:
        log.error("actor %d (pid %d) failed; the run stops. Its traceback:\n%s", error.actor,
                  error.pid, error.traceback.rstrip())
        last = error.traceback.strip().splitlines()[-1]
        return ActorFailed(f"actor {error.actor} (pid {error.pid}) failed: {last}")


__all__ = ["ActorFailed", "ActorPool", "actor_seed", "lm_budget_share"]
