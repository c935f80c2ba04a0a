"""Policy search with an LLM as the optimiser: ``python policy_search_run.py [key=value ...]``
(Hydra; every key is documented in ``policy_search.yaml``; docs/optimizers.md)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from llf_run import CONFIG_ERROR, _remove_if_empty

log = logging.getLogger("ellm")


@hydra.main(version_base="1.3", config_path=".", config_name="policy_search")
def main(cfg: DictConfig) -> None:
    from baselines.policy_search_run import PolicySearchRun
    from ellm.errors import ConfigError

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run = PolicySearchRun(cfg, run_dir)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        _remove_if_empty(run_dir)
        sys.exit(CONFIG_ERROR)
    metrics = run.run()
    print("\n" + run.closing_message(metrics))


if __name__ == "__main__":
    main()
