"""The original's launcher: a 2-seed sweep through Hydra's submitit_local (the same plugin as
submitit_slurm), so the path to a SLURM cluster is exercised, not only documented."""

from __future__ import annotations

import json

import pytest
from conftest import csv_rows

pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                    reason="needs the slurm extra: pip install -e '.[slurm]'")
pytestmark = pytest.mark.e2e


def test_two_seed_sweep_through_submitit_local(train, tmp_path):
    train("-m", "hydra/launcher=ellm_local", "hydra.launcher.cpus_per_task=1",
              "hydra.launcher.gpus_per_node=0", "hydra.launcher.mem_gb=2", "seed=1,2",
              "num_train_frames=60", "num_seed_frames=20", "eval_every_frames=60",
              "num_eval_episodes=1", "env_spec.length=20", "batch_size=8",
              "replay_buffer_num_workers=0", "progress=false", "exp_name=SUB", timeout=600)
    (sweep,) = tmp_path.glob("exp_local/*/SUB_*")
    assert list((sweep / ".submitit").iterdir())  # the jobs went through submitit
    jobs = sorted(p for p in sweep.iterdir() if p.name.endswith(("seed1", "seed2")))
    assert [p.name for p in jobs] == ["0_seed1", "1_seed2"]
    for seed, job in enumerate(jobs, start=1):
        assert json.loads((job / "config.json").read_text())["seed"] == seed
        assert [int(r["frame"]) for r in csv_rows(job / "eval.csv")] == [0, 60]
