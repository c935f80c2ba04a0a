"""Play a language-feedback environment with a policy: ``python llf_run.py [key=value ...]``
(Hydra; every key is documented in ``llf.yaml``; docs/llf.md)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path=".", config_name="llf")
def main(cfg: DictConfig) -> None:
    from baselines.llf_run import LLFRun
    from ellm.entry import run_in_hydra_dir

    run_in_hydra_dir(LLFRun, cfg)


if __name__ == "__main__":
    main()
