"""Checks of the training config before anything starts, and secret-free copies of it.

Every problem is reported as a :class:`ConfigError` naming the offending key and what was
expected. Hydra's struct mode already rejects unknown keys.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from text_crafter.actions import ACTION_SPACES, GOOD_ACTIONS
from text_crafter.env import ENV_SPECS

SECRET_KEYS = frozenset({"openai_key", "openai_org", "api_key"})
REDACTED = "<redacted>"
HOUSEKEEP = "Housekeep"  # env_spec.name of Text-Housekeep (ellm/housekeep_run.py)
log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key."""


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def _check(cfg: DictConfig, key: str, ok: Callable[[Any], bool], expected: str) -> None:
    value = _get(cfg, key)
    try:
        good = ok(value)
    except TypeError:
        good = False
    if not good:
        raise ConfigError(f"{key}={value!r} is invalid: expected {expected}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


INT_RANGES = {
    "num_train_frames": 0, "num_seed_frames": 0, "eval_every_frames": 1, "num_eval_episodes": 0,
    "frame_stack": 1, "nstep": 1, "batch_size": 1, "replay_buffer_size": 1,
    "replay_buffer_num_workers": 0, "train_log_every": 1, "seed": 0, "env_spec.length": 1,
    "agent.update_every_steps": 1, "agent.critic_target_update_every_steps": 1,
    "agent.train_eps_decay_steps": 0, "agent.hidden_dim": 1,
}
BOOL_KEYS = (
    "use_goal", "use_image", "use_tb", "use_wandb", "save_snapshot", "save_buffer",
    "finetune_snapshot", "clip_reward", "single_goal_eval", "train_after_reward",
    "decay_after_reward", "use_extr_rew", "env_spec.dying", "env_spec.use_sbert",
    "env_spec.use_language_state", "env_spec.check_ac_success",
    "env_spec.lm_spec.novelty_bonus", "env_spec.lm_spec.dummy_lm",
)
UNSUPPORTED = {
    "env_spec.use_state_captioner": "learned captioners need weights the authors never published",
    "env_spec.use_transition_captioner": "learned captioners need weights the authors never published",
    "save_video": "eval videos are not implemented",
    "save_offline": "offline datasets are not implemented",
    "use_offline_buffer": "offline datasets are not implemented",
    "offline_buffer": "offline datasets are not implemented",
}


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError for the first invalid value found."""
    for key, low in INT_RANGES.items():
        _check(cfg, key, lambda v, low=low: _is_int(v) and v >= low, f"an integer >= {low}")
    for key in BOOL_KEYS:
        _check(cfg, key, lambda v: isinstance(v, bool), "true or false")
    _check(cfg, "discount", lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]")
    _check(cfg, "lr", lambda v: _is_num(v) and v > 0, "a positive number")
    _check(cfg, "other_model_prob", lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]")
    _check(cfg, "env_spec.threshold", lambda v: _is_num(v) and -1 <= v <= 1,
           "a cosine similarity in [-1, 1]")
    for key in ("agent.train_eps_min", "agent.train_eps_max", "agent.eval_eps"):
        _check(cfg, key, lambda v: _is_num(v) and 0 <= v <= 1, "a probability in [0, 1]")
    _check(cfg, "env_spec.name", lambda v: v in ENV_SPECS or v == HOUSEKEEP,
           f"one of {sorted(ENV_SPECS) + [HOUSEKEEP]}")
    _check(cfg, "env_spec.action_space_type", lambda v: v in ACTION_SPACES,
           f"one of {sorted(ACTION_SPACES)}")
    _check(cfg, "use_language_state", lambda v: v in (None, "sbert"), "null or 'sbert'")
    _check(cfg, "finetune_settings", lambda v: v in ("train_all", "linear", "critic"),
           "train_all, linear or critic")
    _check(cfg, "env_spec.single_task", lambda v: v is None or v in GOOD_ACTIONS,
           f"null or one of {list(GOOD_ACTIONS)}")
    _check(cfg, "env_spec.single_goal_hierarchical", lambda v: v in (False, True, "reward_last"),
           "False, True or reward_last")
    for key, why in UNSUPPORTED.items():
        if _get(cfg, key):
            raise ConfigError(f"{key}={_get(cfg, key)!r} is not supported: {why}")
    if _get(cfg, "finetune_snapshot") and not _get(cfg, "snapshot_path"):
        if not _get(cfg, "expl_agent_path"):
            raise ConfigError("finetune_snapshot=True needs snapshot_path (the pretrained run)")
        # The original README's Housekeep guided-exploration command passes it with no snapshot.
        log.warning("finetune_snapshot=True without snapshot_path: no weights are loaded, the "
                    "agent starts fresh and expl_agent_path only guides its exploration")
    if _get(cfg, "env_spec.name") == HOUSEKEEP:
        from ellm.housekeep_run import validate as validate_housekeep

        validate_housekeep(cfg)
    resolve_device(_get(cfg, "device"))


def resolve_device(device: Any) -> torch.device:
    """``auto`` picks cuda when available; asking for cuda without one is an error."""
    if not isinstance(device, str):
        raise ConfigError(f"device={device!r} is invalid: expected auto, cpu, cuda or cuda:N")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"device={device!r} is invalid: {exc}") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device={device!r} but this machine has no CUDA GPU usable by torch "
            f"{torch.__version__}; use device=cpu or device=auto")
    if resolved.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={device!r} is invalid: expected auto, cpu, cuda or cuda:N")
    return resolved


def redacted(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain data with every secret-bearing key blanked."""
    data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)

    def scrub(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (REDACTED if k in SECRET_KEYS and v else scrub(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [scrub(v) for v in node]
        return node

    return scrub(data)
