"""Resuming is the run, continued: the snapshot's config, where only SAFE_ON_RESUME may change."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from omegaconf import DictConfig, OmegaConf, open_dict

from ellm.conf import GROUPS, resumes
from ellm.errors import ConfigError
from ellm.run import checkpoint
from ellm.run.config import SECRET_KEYS, leaves

log = logging.getLogger(__name__)

SAFE_ON_RESUME: Final = frozenset({
    "num_train_frames", "snapshot_path", "save_snapshot", "save_buffer", "resume_id",
    "use_tb", "use_wandb", "progress", "progress_every_s", "exp_name", "device", "torch_threads",
    "replay_buffer_num_workers", "num_actors", "env_spec.lm_spec.budget",
    "env_spec.lm_spec.base_url", "env_spec.lm_spec.timeout", "env_spec.lm_spec.max_retries",
    "env_spec.lm_spec.cache_dir", "env_spec.lm_spec.backoff", "env_spec.lm_spec.max_backoff",
})


# What fixes the agent's networks: a finetuned or guiding agent's come from its run's record.
STRUCTURE_KEYS: Final = (
    "use_goal", "use_language_state", "use_image", "frame_stack", "sbert_model",
    "agent.hidden_dim", "agent.goal_encoder_type", "agent.joint_text",
    "agent.reinit_text_encoder", "env_spec.action_space_type",
)


def resuming(cfg: DictConfig) -> bool:
    return resumes(cfg.get("snapshot_path"), cfg.get("finetune_snapshot"))


def named_keys(overrides: Sequence[str]) -> tuple[set[str], list[str]]:
    """(the keys ``key=value`` overrides name, the config-group overrides), ``hydra.*`` left out."""
    keys, groups = set(), []
    for override in overrides:
        key = override.lstrip("+~").partition("=")[0].strip()
        if key.startswith(("hydra.", "hydra/")) or not key:
            continue
        if key in GROUPS or "/" in key:
            groups.append(override)
        else:
            keys.add(key)
    return keys, groups


def explicit_keys(overrides: Sequence[str],
                  compose: Callable[[list[str]], DictConfig] | None) -> set[str]:
    """Every key the command line sets, its config groups' changes included."""
    keys, groups = named_keys(overrides)
    if groups and compose is not None:
        # The groups alone against none: a plain key may need its group to exist at all.
        with_groups = leaves(OmegaConf.to_container(compose(groups), resolve=False))
        without = leaves(OmegaConf.to_container(compose([]), resolve=False))
        keys |= {k for k, v in with_groups.items() if without.get(k, object()) != v}
    return {k for k in keys if not k.startswith("hydra")}


def resumed_config(cfg: DictConfig, overrides: Sequence[str],
                   compose: Callable[[list[str]], DictConfig] | None = None) -> DictConfig:
    """``cfg`` on the snapshot's recorded config; ConfigError for each key that may not change."""
    path = checkpoint.resolve(cfg.snapshot_path, "snapshot_path")
    recorded = checkpoint.load(path)[1].get("config")
    if not isinstance(recorded, Mapping):
        log.warning("snapshot_path: %s records no config (an older snapshot): resuming with "
                    "the command line's config as it is", path)
        return cfg
    explicit = explicit_keys(overrides, compose)
    then = leaves(dict(recorded))
    now = leaves(OmegaConf.to_container(cfg, resolve=True))
    refused, taken = [], {}
    # A key only a config group adds (agent=noveld's agent.noveld, +agent.rep_dim=16) is absent
    # from a command line that names the snapshot alone: it comes back from the record.
    for key in then.keys() - now.keys():
        if _from_record(key):
            taken[key] = then[key]
    for key, value in now.items():
        if not _from_record(key) or key not in then:
            continue
        if then[key] == value:
            continue
        if key in explicit:
            if key not in SAFE_ON_RESUME:
                refused.append(f"{key} (snapshot: {then[key]!r}, now: {value!r})")
        else:
            taken[key] = then[key]
    if refused:
        raise ConfigError(
            f"snapshot_path={cfg.snapshot_path}: a resumed run continues as it was recorded, "
            f"but the command line changes {', '.join(refused)}. Only "
            f"{', '.join(sorted(SAFE_ON_RESUME))} may change when resuming; drop the others "
            "(the snapshot's values are used), or start a new run from these weights with "
            "finetune_snapshot=True")
    kept = taken.get("replay_buffer_size")
    if kept is not None and kept < cfg.num_train_frames:
        log.warning("replay_buffer_size stays the snapshot's %d, below num_train_frames=%d: the "
                    "replay drops its oldest episodes past %d transitions", kept,
                    cfg.num_train_frames, kept)
    return _updated(cfg, taken, "resuming with the run's own settings")


def _updated(cfg: DictConfig, taken: Mapping[str, Any], what: str) -> DictConfig:
    out = cfg.copy()
    with open_dict(out):
        for key, value in taken.items():
            OmegaConf.update(out, key, value, merge=False, force_add=True)
    if taken:
        log.info("%s: %s", what, _shown(taken))
    return out


def inherited_config(cfg: DictConfig, overrides: Sequence[str],
                     compose: Callable[[list[str]], DictConfig] | None = None) -> DictConfig:
    """Finetuning or guiding: STRUCTURE_KEYS as the pretrained run recorded them."""
    sources = [key for key in ("snapshot_path", "expl_agent_path") if cfg.get(key)]
    if not sources:
        return cfg
    explicit = explicit_keys(overrides, compose)
    now = leaves(OmegaConf.to_container(cfg, resolve=True))
    taken: dict[str, Any] = {}
    for source in sources:
        recorded = checkpoint.load(cfg[source], source)[1].get("config")
        if not isinstance(recorded, Mapping):
            continue
        then = leaves(dict(recorded))
        for key in STRUCTURE_KEYS:
            if key not in then or then[key] == taken.get(key, now.get(key)):
                continue
            if key in explicit or key in taken:
                mine = taken.get(key, now.get(key))
                raise ConfigError(
                    f"{key}={mine!r}, but the agent at {source}={cfg[source]} was trained with "
                    f"{key}={then[key]!r}: the networks must match; drop {key} (its value comes "
                    "from the pretrained run)")
            taken[key] = then[key]
    return _updated(cfg, taken, "the pretrained agent's structure")


def _from_record(key: str) -> bool:
    """Whether a resumed run takes ``key`` from its record: secrets are recorded blanked, and
    finetune_snapshot and hydra say what this command does."""
    return not (key.rpartition(".")[2] in SECRET_KEYS or key == "finetune_snapshot"
                or key.startswith("hydra"))


def _shown(values: Mapping[str, Any], limit: int = 12) -> str:
    items = [f"{k}={v!r}" for k, v in sorted(values.items())]
    more = f", and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


__all__ = ["SAFE_ON_RESUME", "STRUCTURE_KEYS", "explicit_keys", "inherited_config",
           "resumed_config", "resuming"]
