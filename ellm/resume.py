"""Resuming is the run, continued: ``snapshot_path=RUN_DIR`` takes the snapshot's config as base.

Only keys of SAFE_ON_RESUME may differ from the snapshot's; any other difference stops the
run before it starts, naming both values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from omegaconf import DictConfig, OmegaConf, open_dict

from ellm import checkpoint
from ellm.config import SECRET_KEYS, leaves
from ellm.errors import ConfigError

log = logging.getLogger(__name__)

SAFE_ON_RESUME: Final = frozenset({
    "num_train_frames", "snapshot_path", "save_snapshot", "save_buffer", "resume_id",
    "use_tb", "use_wandb", "progress", "progress_every_s", "exp_name", "device", "torch_threads",
    "replay_buffer_num_workers", "num_actors", "env_spec.lm_spec.budget",
    "env_spec.lm_spec.base_url", "env_spec.lm_spec.timeout", "env_spec.lm_spec.max_retries",
    "env_spec.lm_spec.cache_dir", "env_spec.lm_spec.backoff", "env_spec.lm_spec.max_backoff",
})

GROUPS: Final = ("agent", "method", "preset")


def resuming(cfg: DictConfig) -> bool:
    return bool(cfg.get("snapshot_path")) and not cfg.get("finetune_snapshot")


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
    out = cfg.copy()
    with open_dict(out):
        for key, value in taken.items():
            OmegaConf.update(out, key, value, merge=False, force_add=True)
    if taken:
        log.info("resuming with the run's own settings: %s", _shown(taken))
    return out


def _from_record(key: str) -> bool:
    """Whether a resumed run takes ``key`` from its record: secrets are recorded blanked, and
    finetune_snapshot and hydra say what this command does."""
    return not (key.rpartition(".")[2] in SECRET_KEYS or key == "finetune_snapshot"
                or key.startswith("hydra"))


def _shown(values: Mapping[str, Any], limit: int = 12) -> str:
    items = [f"{k}={v!r}" for k, v in sorted(values.items())]
    more = f", and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


__all__ = ["SAFE_ON_RESUME", "explicit_keys", "resumed_config", "resuming"]
