"""Sweeps: the original's launcher, a 2-seed sweep through Hydra's submitit_local (the same
plugin as submitit_slurm), so the path to a SLURM cluster is exercised, not only documented;
and the one closing line of every sweep, pointing at the report of all its runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, csv_rows
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

CONFIGS = [(ROOT, "config")] + [(ROOT / "llm_in_the_loop" / name / "conf", name)
                                for name in ("llf", "policy_search", "code_policy")]


@pytest.mark.parametrize(("config_dir", "name"), CONFIGS)
def test_a_sweep_ends_pointing_at_the_report_of_all_its_runs(tmp_path, capsys, config_dir,
                                                            name):
    sweep = tmp_path / "SWEEP_120000"
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        cfg = compose(name, overrides=[f"hydra.sweep.dir={sweep}"], return_hydra_config=True)
    for job in ("0_seed1", "1_seed2"):
        (sweep / job).mkdir(parents=True)
        (sweep / job / "config.json").write_text(json.dumps({"seed": int(job[-1])}))
    (sweep / ".submitit").mkdir()  # not a run
    for callback in cfg.hydra.callbacks.values():  # as Hydra calls them after the last job
        instantiate(callback).on_multirun_end(config=cfg)
    assert capsys.readouterr().out.strip().splitlines() == [
        f"Sweep done: 2 runs in {sweep}",
        f"Plot them together: python -m ellm_tools.report {sweep}  (writes {sweep / 'report'})"]


@pytest.mark.e2e
def test_two_seed_sweep_through_submitit_local(train, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="needs the slurm extra: pip install -e '.[slurm]'")
    proc = train("-m", "hydra/launcher=ellm_local", "hydra.launcher.cpus_per_task=1",
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
    # The launching process ends with the sweep's report, after the jobs it waited for.
    relative = Path(sweep).relative_to(tmp_path)
    assert proc.stdout.rstrip().endswith(
        f"Sweep done: 2 runs in {relative}\nPlot them together: python -m ellm_tools.report "
        f"{relative}  (writes {relative / 'report'})"), proc.stdout[-2000:]
