"""Policy search with an LLM as the optimiser: ``python policy_search_run.py [key=value ...]``
(Hydra; every key is documented in ``policy_search.yaml``; docs/optimizers.md)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path=".", config_name="policy_search")
def main(cfg: DictConfig) -> None:
    from baselines.policy_search_run import PolicySearchRun
    from ellm.entry import run_in_hydra_dir

    run_in_hydra_dir(PolicySearchRun, cfg)


if __name__ == "__main__":
    main()
