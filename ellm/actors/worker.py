"""One actor process: the run's rollout on its own env, acting with a CPU copy of the policy.

Each actor writes to a pipe of its own: a message torn by an actor killed mid-write on a
shared queue would block every other actor.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch
from tqdm import tqdm

from ellm.actors.messages import CHUNK_STEPS, ActorError, ChunkWriter
from ellm.actors.shared import ENDING, RUNNING, Shared, SharedPolicy
from ellm.actors.watch import die_with_parent
from ellm.games import EpisodeCounted
from ellm.loop.collect import EpisodeEnd
from ellm.loop.parts import add_guide, make_agent, rollout_parts
from ellm.loop.timing import Timer
from ellm.run.checkpoint import seed_everything
from ellm.run.config import RunSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActorSpec:
    """What one actor is told at start."""

    index: int
    run: RunSpec  # its lm: the actor's share of the run's LM budget
    env_seed: int
    seed: int
    env_episodes: int
    parent: int
    ahead: int
    log_file: str | None = None


def actor_main(spec: ActorSpec, policy: SharedPolicy, shared: Shared, pipe: Connection) -> None:
    """The actor process's entry point (spawned); ``pipe`` is its own channel."""
    started = time.monotonic()
    die_with_parent()  # a kill -9 of the main process takes the actors with it
    if os.getppid() != spec.parent:
        return
    # Ctrl-C reaches the whole process group: the main process stops the actors itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # tqdm's default lock is a named semaphore (SBERT's encode opens a bar); ``_exit`` skips the
    # finalizer that would unlink it, and the run's resource tracker reports it leaked.
    tqdm.set_lock(threading.RLock())
    _log_to(spec)
    code = 0
    try:
        actor = Actor(spec, policy, shared, pipe)
        shared.enter(spec.index, RUNNING)
        log.info("ready in %.1f s", time.monotonic() - started)
        actor.run()
    except Exception:  # noqa: BLE001 - any failure is reported, then the actor exits
        shared.enter(spec.index, ENDING)
        pipe.send(ActorError(spec.index, os.getpid(), traceback.format_exc()))
        code = 1
    _exit(pipe, code)


def _exit(pipe: Connection, code: int) -> None:
    """End without the interpreter's slow teardown of torch (docs/scale.md)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    pipe.close()
    os._exit(code)


def _log_to(spec: ActorSpec) -> None:
    """The actor's warnings (an LM outage, a spent budget) to stderr and the run's log."""
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if spec.log_file:
        handlers.append(logging.FileHandler(spec.log_file))
    logging.basicConfig(level=logging.WARNING, handlers=handlers,
                        format=f"[%(asctime)s][%(name)s][%(levelname)s] - actor {spec.index}: "
                        "%(message)s")
    log.setLevel(logging.INFO)


class Actor:
    """Collects episodes for the learner (see the module docstring)."""

    def __init__(self, spec: ActorSpec, policy: SharedPolicy, shared: Shared, pipe: Connection):
        self.spec, self.policy, self.shared, self.pipe = spec, policy, shared, pipe
        torch.set_num_threads(1)
        run = spec.run
        seed_everything(spec.seed)
        cpu = torch.device("cpu")
        parts = rollout_parts(run, cpu, spec.env_seed)
        if isinstance(parts.env, EpisodeCounted):
            parts.env.episode_count = spec.env_episodes
        self.rollout = parts.rollout(run.run.frame_stack)
        build = {"num_actions": parts.env.action_space.n, "device": cpu,
                 "embedder": parts.embedder, "strings": None, "seed": spec.seed}
        self.agent = make_agent(run, hold_epsilon=run.run.decay_after_reward, **build)
        add_guide(self.agent, run, **build)
        self.version = 0
        self.chunks = ChunkWriter(spec.index, parts.inputs)
        self.produced = 0

    def run(self) -> None:
        # Only now that it is RUNNING does it take the policy's lock: the pool terminates a
        # STARTING actor at once, and one killed holding the lock would block the others. The
        # decay a resumed run already started applies from the first step too.
        self._refresh()
        self.agent.text.record_new_embeddings()
        try:
            while not self.shared.stop.is_set():
                self._episode()
        finally:
            self.rollout.goal_source.close()

    def _episode(self) -> None:
        timer = Timer()
        self.chunks.start(self.rollout.reset(), self.rollout)
        while True:
            with timer("throttled"):
                self.shared.wait_for_room(self.spec.index, self.produced, self.spec.ahead)
            if self.shared.stop.is_set():
                return
            step = self.rollout.step(self._act, timer)
            self.produced += 1
            self.chunks.add(step)
            if step.last or len(self.chunks) >= CHUNK_STEPS:
                end = None
                if step.last:
                    end = EpisodeEnd.of(self.rollout, step.info, timer,
                                        self.rollout.goal_source.metrics())
                self.pipe.send(self.chunks.take(end, self._env_episodes(),
                                                self.agent.text.new_embeddings()))
                self._refresh()
            if step.last:
                return

    def _act(self, inputs: dict[str, Any]) -> int:
        return self.agent.act(inputs, self.shared.frame.value, eval_mode=False)

    def _refresh(self) -> None:
        """The learner's newest weights, and epsilon's decay once the learner started it."""
        self.version = self.policy.refresh(self.agent, self.version, self.shared.stop)
        if self.shared.decay_from.value >= 0:
            self.agent.start_epsilon_decay(self.shared.decay_from.value)

    def _env_episodes(self) -> int | None:
        env = self.rollout.env
        return int(env.episode_count) if isinstance(env, EpisodeCounted) else None


__all__ = ["ActorSpec", "actor_main"]
