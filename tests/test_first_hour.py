"""A newcomer's first commands: help in seconds with only our groups, a rejected config that
leaves nothing behind and says so once, the end of a run in words, a readable redirected log."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, TINY, find_run, train_env

pytestmark = pytest.mark.e2e


def test_help_lists_only_our_groups_and_the_documented_keys(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "--help"], cwd=tmp_path,
                          env=train_env(tmp_path), capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert ("  method: apt, e3b, ellm, ellm-pixels, extrinsic, noveld, novelty, random, rnd, zero\n"
            "  agent: apt, dqn, noveld, rnd\n  preset: cpu_medium, cpu_small, smoke\n") in out
    assert "    price: null " in out and "    cache_only: False " in out  # every LM key
    assert ".venv" not in out and "site-packages" not in out and "test_utils" not in out
    assert "num_train_frames: 5000000          # env steps to train for" in out  # config.yaml
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("overrides, message", [
    (["num_train_frams=10"], "num_train_frams"),  # Hydra's check: an unknown key
    (["env_spec.lm_spec.lm_class=Gpt4"], "lm_class"),  # ours, before SBERT loads
    (["-m", "seed=1,2", "num_train_frames=10,-5"], "num_train_frames=-5"),  # one job of a sweep
])
def test_a_rejected_config_exits_2_says_why_once_and_leaves_nothing(train, tmp_path, overrides,
                                                                      message):
    proc = train(*overrides, "exp_name=BAD", check=False, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert (proc.stdout + proc.stderr).count("error:") == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("exp_local")), list(tmp_path.rglob("*"))


def test_a_missing_snapshot_creates_no_directory(train, tmp_path):
    missing = tmp_path / "nope"
    proc = train(f"snapshot_path={missing}", check=False, timeout=120)
    assert proc.returncode == 2 and "snapshot_path" in proc.stderr
    assert not missing.exists() and not list(tmp_path.glob("exp_local"))


def test_the_end_of_a_run_is_said_in_words_and_a_redirected_log_has_lines(train, tmp_path):
    defaults = [o for o in TINY if not o.startswith("replay_buffer_num_workers=")]
    proc = train("exp_name=WORDS", *defaults, "progress=true", "progress_every_s=0")
    run = find_run(tmp_path, "WORDS")
    out = proc.stdout + proc.stderr
    # The default replay workers fit the machine: no third-party warning about them.
    assert "worker processes" not in out and "Warning" not in out
    assert "Last evaluation (1 episode): " in out
    assert " achievements unlocked per episode, Crafter score " in out and "%." in out
    assert f"python -m ellm_tools.report {run}" in out
    assert "\r" not in out  # no progress bar written into a file
    assert "frame 200/240 (83%) | " in out and "frames/s" in out  # 0 s apart: every frame
    assert out.count("time estimate: about ") == 1
    assert "for the remaining 239 frames, a projection at " in out  # after the first frame
    assert "nan" not in out


def test_the_setup_script_leaves_wandb_mode_to_the_user():
    # Exported, WANDB_MODE makes transformers print a notice at import in every run.
    assert "WANDB_MODE" not in "".join(
        line for line in (ROOT / "scripts" / "_venv.sh").read_text().splitlines(True)
        if line.startswith("export"))


def test_the_package_builds_without_a_license_warning(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "license" not in (proc.stdout + proc.stderr).lower()
    assert list(tmp_path.glob("ellm-*.whl"))
