"""A run's config, typed and checked (by ``ellm.run.config``): what its every part reads."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from ellm.agent.precision import COMPILE_MODES, COMPILE_STRINGS
from ellm.errors import ConfigError
from ellm.lm import LMSpec
from ellm.method import Method
from ellm.run.schema import boolean, integer, is_int, is_num, one_of, valid

log = logging.getLogger(__name__)

# Kept for the original's commands, read by nothing: (quiet values, config.yaml's first; why)
IGNORED_KEYS: dict[str, tuple[tuple[Any, ...], str]] = {
    "train_log_every": ((5000,), "training metrics are logged once per episode"),
    "vocab_size": ((102,), "the original's word vocabulary; text is encoded by SBERT"),
    "agent.vocab": (("${vocab_size}",), "the original's word vocabulary (see vocab_size)"),
    "agent.use_tb": (("${use_tb}",), "the logger writes TensorBoard (top-level use_tb)"),
    "agent.use_wandb": (("${use_wandb}",), "the logger writes W&B (top-level use_wandb)"),
    "env_spec.env_reward": ((None,), "set by the code in the original"),
    "env_spec.use_sbert": ((False, True), "SBERT is the only text encoder"),
    "env_spec.device": (("${device}",), "the SBERT reward model runs on the run's device"),
    "eval_video_goals": (([],), "eval videos are not implemented"),
}


def warn_ignored(cfg: DictConfig) -> None:
    """One warning for each ignored key the run sets to a value it will not honour."""
    given = leaves(OmegaConf.to_container(cfg, resolve=False))
    for key, (quiet, why) in IGNORED_KEYS.items():
        if given.get(key, quiet[0]) not in quiet:
            log.warning("%s=%r is accepted and ignored: %s", key, given[key], why)


def leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": value}`` for every leaf of nested mappings."""
    if not isinstance(data, Mapping) or (prefix and not data):
        return {prefix: data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


# Processes and threads of one run: past 4 per CPU of this machine they only wait for each other;
# 16 at least, so that the original's commands (5 replay workers) run on a small machine.
MAX_WORKERS = max(16, 4 * (os.cpu_count() or 1))
MAX_SEED = 2**32 - 1  # numpy's seeds
MAX_BATCH = 2**16  # a batch of 4 stacked frames is 1.8 GB there, before its copies in flight
MAX_FRAME_STACK = 64
MAX_NSTEP = 1000  # every replay episode holds nstep rows more for its n-step returns
RUN_DIR_HINT = "to put the run elsewhere, set hydra.run.dir=DIR"


def workers(low: int, auto: bool = True) -> Any:
    return valid(f"{'auto or ' if auto else ''}an integer in [{low}, {MAX_WORKERS}] (4 per CPU "
                 "of this machine, 16 at least)",
                 lambda v: (auto and v == "auto") or (is_int(v) and low <= v <= MAX_WORKERS))


def run_name_ok(v: Any) -> bool:
    """A name that stays one folder of ``exp_local/<date>``: no separator, no ``..``, no
    control character."""
    if not (isinstance(v, str | int | float) or v is None):
        return False
    name = str(v)
    return not (set(name) & {"/", "\\", os.sep, os.altsep or "/"} or ".." in name
                or any(ord(c) < 32 or ord(c) == 127 for c in name))


@dataclass(frozen=True)
class RunBasics:
    """The top-level keys both engines read: the run's name, logs, snapshots and progress."""

    use_tb: bool = boolean()
    use_wandb: bool = boolean()
    save_snapshot: bool = boolean()
    progress: bool = boolean()
    progress_every_s: float = valid("a number >= 0", lambda v: is_num(v) and v >= 0)
    exp_name: str = valid("a name for one folder under exp_local/<date> (no path separator, "
                          f"no '..', no control character); {RUN_DIR_HINT}", run_name_ok)
    snapshot_path: str | None = valid("a path, or null", lambda v: v is None or isinstance(v, str))
    finetune_snapshot: bool = boolean()
    sbert_model: str | None = valid("a sentence-transformers model name or folder, or null (the "
                                    "packaged all-MiniLM-L6-v2)",
                                    lambda v: v is None or (isinstance(v, str) and bool(v)))


@dataclass(frozen=True)
class RunOptions(RunBasics):
    """Top-level keys of ``config.yaml`` (documented there) that the agent block does not
    take."""

    num_train_frames: int = integer(0)
    num_seed_frames: int = integer(0)
    num_actors: int = workers(1, auto=False)
    actor_sync_frames: int = integer(1)
    eval_every_frames: int = integer(1)
    num_eval_episodes: int = integer(0)
    frame_stack: int = integer(1, high=MAX_FRAME_STACK)
    nstep: int = integer(1, high=MAX_NSTEP)
    batch_size: int = integer(1, high=MAX_BATCH)
    replay_buffer_size: int = integer(1)
    replay_buffer_num_workers: int | str = workers(0)
    seed: int = integer(0, high=MAX_SEED)
    precision: str = one_of("fp32", "bf16")
    compile: bool | str = valid(COMPILE_MODES,
                                lambda v: isinstance(v, bool) or v in COMPILE_STRINGS)
    torch_threads: int | str = workers(1)
    discount: float = valid("a number in (0, 1]", lambda v: is_num(v) and 0 < v <= 1)
    # AGENT_KEYS_AT_TOP are the agent's options (agent.x: ${x}), checked once, there, under
    # these names.
    save_buffer: bool = boolean()
    clip_reward: bool = boolean()
    single_goal_eval: bool = boolean()
    train_after_reward: bool = boolean()
    decay_after_reward: bool = boolean()
    use_extr_rew: bool = boolean()
    resume_id: str | None = valid("a W&B run id, or null",
                                  lambda v: v is None or isinstance(v, str))
    expl_agent_path: str | None = valid("a path, or null",
                                        lambda v: v is None or isinstance(v, str))


@dataclass(frozen=True)
class EnvOptions:
    """``env_spec`` keys every game reads; each game checks its own (:meth:`Game.validate`)."""

    length: int = integer(1)
    dying: bool = boolean()
    name: str = valid("a game's env id", lambda v: isinstance(v, str))
    check_ac_success: bool = boolean()
    threshold: float = valid("a cosine similarity in [-1, 1]",
                            lambda v: is_num(v) and -1 <= v <= 1)
    max_seq_len: int = valid("an integer in [1, 256] (two texts share the sentence model's 512 "
                            "positions)", lambda v: is_int(v) and 1 <= v <= 256)
    text_obs: bool = boolean(False)
    use_language_state: bool | None = valid("true, false or null",
                                            lambda v: v is None or isinstance(v, bool), None)

    def __post_init__(self) -> None:
        if self.use_language_state is False and self.text_obs:
            raise ConfigError("env_spec.text_obs=True and env_spec.use_language_state=False "
                              "disagree: the latter is the original's name for text_obs; set one")

    @property
    def writes_text(self) -> bool:
        """Whether the env writes its text observation (Housekeep; Crafter's always does)."""
        return self.text_obs if self.use_language_state is None else self.use_language_state


@dataclass(frozen=True)
class RunSpec:
    """A run's config as ``validate`` parsed it (``cfg``: the whole of it, for its record)."""

    cfg: DictConfig
    game: Any  # an ellm.games.Game
    method: Method
    agent: Any
    lm: LMSpec
    device: torch.device
    run: RunOptions
    env: EnvOptions
    game_options: Any  # what the game's validate parsed: the env_spec keys only it reads
    agent_class: str
