"""Train an ELLM agent: ``python train.py [key=value ...]`` (Hydra; see config.yaml and README)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from ellm.checkpoint import SNAPSHOT_NAME

log = logging.getLogger("ellm")


def _run_dir(snapshot_path, finetune_snapshot, default: str) -> str:
    """Resuming (snapshot_path without finetune_snapshot) continues in the snapshot's run dir."""
    if snapshot_path in (None, "", "null") or str(finetune_snapshot).lower() == "true":
        return default
    path = Path(str(snapshot_path)).expanduser()
    return str(path.parent if path.name == SNAPSHOT_NAME or path.is_file() else path)


OmegaConf.register_new_resolver("ellm_run_dir", _run_dir, replace=True)

_KEY_OVERRIDES = ("openai_key", "env_spec.lm_spec.openai_key")


def take_key_overrides(argv: list[str]) -> list[str]:
    """Move a legacy ``[env_spec.lm_spec.]openai_key=KEY`` override into the environment.

    The original README passes the API key on the command line; Hydra would print it when it
    launches a sweep and store it in ``multirun.yaml``. Taken out of ``argv`` here, it reaches
    the LM client only through :data:`ellm.lm.config.LEGACY_KEY_ENV`.
    """
    from ellm.lm.config import LEGACY_KEY_ENV

    kept = []
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if sep and key in _KEY_OVERRIDES:
            if value.strip("'\"") not in ("", "null", "None"):
                os.environ[LEGACY_KEY_ENV] = value.strip("'\"")
                log.warning("%s on the command line is deprecated: export OPENAI_API_KEY "
                            "instead", key)
            continue
        kept.append(arg)
    return kept


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg: DictConfig) -> None:
    from ellm.checkpoint import CheckpointError
    from ellm.config import ConfigError
    from ellm.workspace import Workspace

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        workspace = Workspace(cfg, run_dir)
    except (ConfigError, CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    workspace.train()
    print("\n" + workspace.closing_message())


if __name__ == "__main__":
    sys.argv[1:] = take_key_overrides(sys.argv[1:])
    main()
