"""What the benches share: the bench run's config, a workspace built from it, a run's frames/s
and a process's private memory."""

from __future__ import annotations

import csv
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir

ROOT = Path(__file__).resolve().parents[2]
BASE = [
    "env_spec.use_sbert=True", "use_goal=True", "use_language_state=sbert",
    "env_spec.lm_spec.lm_class=SimpleOracle", "device=cpu", "progress=false",
    "num_eval_episodes=0", "save_snapshot=false", "eval_every_frames=100000000",
]


def compose(overrides: list[str]):
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


def workspace(overrides: list[str], run_dir: Path):
    from ellm.loop.workspace import Workspace
    from ellm.run.config import validate

    return Workspace(validate(compose(overrides)), run_dir)


def run_fps(run_dir: Path) -> float:
    """Mean frames/s of a run's training episodes after the first (start-up excluded)."""
    with (run_dir / "train.csv").open() as f:
        fps = [float(row["fps"]) for row in csv.DictReader(f)][1:]
    return sum(fps) / max(len(fps), 1)


def private_mib(pid: int) -> float:
    """Private (unshared) resident memory of a process, in MiB."""
    fields = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    kib = sum(int(f.split()[1]) for f in fields if f.startswith(("Private_Clean", "Private_Dirty")))
    return kib / 1024
