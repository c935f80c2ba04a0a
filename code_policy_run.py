"""Code as policy, optimised by an LLM: ``python code_policy_run.py [key=value ...]``
(Hydra; every key is documented in ``code_policy.yaml``; docs/optimizers.md)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path=".", config_name="code_policy")
def main(cfg: DictConfig) -> None:
    from baselines.code_policy_run import CodePolicyRun
    from ellm.entry import run_in_hydra_dir

    run_in_hydra_dir(CodePolicyRun, cfg)


if __name__ == "__main__":
    main()
