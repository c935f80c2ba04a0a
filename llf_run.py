"""Play a language-feedback environment with a policy: ``python llf_run.py [key=value ...]``
(Hydra; every key is documented in ``llf.yaml``; docs/llf.md)."""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

log = logging.getLogger("ellm")
CONFIG_ERROR = 2  # exit code of a config rejected before anything runs


def _remove_if_empty(run_dir: Path) -> None:
    """Remove the run dir Hydra made for a rejected config, and its empty parents."""
    for path in (run_dir, *run_dir.parents):
        if path == Path.cwd() or not path.is_dir() or any(path.iterdir()):
            break
        shutil.rmtree(path, ignore_errors=True)


@hydra.main(version_base="1.3", config_path=".", config_name="llf")
def main(cfg: DictConfig) -> None:
    from baselines.llf_run import LLFRun
    from ellm.errors import ConfigError

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run = LLFRun(cfg, run_dir)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        _remove_if_empty(run_dir)
        sys.exit(CONFIG_ERROR)
    metrics = run.run()
    print("\n" + run.closing_message(metrics))


if __name__ == "__main__":
    main()
