"""Overrides and paths given to ``python train.py``: every count has a bound that fits the machine,
``exp_name`` stays one folder under ``exp_local/<date>``, a file of the wrong type is named for
what it should have been, and a rejected config leaves nothing behind."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from ellm.run import checkpoint
from ellm.run.config import ConfigError, check_config_file, validate
from ellm.run.spec import MAX_WORKERS

ROOT = Path(__file__).resolve().parents[1]


def config(*overrides: str):
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        return compose("config", overrides=list(overrides))


BIG = 10**23
TOO_LARGE = [
    (f"torch_threads={MAX_WORKERS + 1}", "torch_threads"), ("torch_threads=100000", "torch_threads"),
    ("num_actors=100000", "num_actors"),
    ("replay_buffer_num_workers=100000", "replay_buffer_num_workers"),
    (f"seed={BIG}", "seed"), ("seed=1e23", "seed"), (f"seed={2**32}", "seed"),
    ("batch_size=1000000000", "batch_size"), ("nstep=100000", "nstep"),
    ("frame_stack=1000", "frame_stack"), ("agent.hidden_dim=1000000", "agent.hidden_dim"),
    ("agent=apt agent.rep_dim=1000000", "agent.rep_dim"),
    ("agent=apt agent.icm_hidden_dim=1000000", "agent.icm_hidden_dim"),
    (f"num_train_frames={BIG}", "num_train_frames"), (f"num_seed_frames={BIG}", "num_seed_frames"),
    (f"eval_every_frames={BIG}", "eval_every_frames"),
    (f"num_eval_episodes={BIG}", "num_eval_episodes"),
    (f"replay_buffer_size={BIG}", "replay_buffer_size"),
    (f"actor_sync_frames={BIG}", "actor_sync_frames"), (f"env_spec.length={BIG}", "env_spec.length"),
    (f"agent.train_eps_decay_steps={BIG}", "agent.train_eps_decay_steps"),
    (f"agent.update_every_steps={BIG}", "agent.update_every_steps"),
]


@pytest.mark.parametrize("override, key", TOO_LARGE)
def test_a_count_past_its_bound_is_refused_naming_its_key(override, key):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=\S+ is invalid: expected"):
        validate(config(*override.split()))


@pytest.mark.parametrize("override", [
    f"torch_threads={MAX_WORKERS}", f"num_actors={min(MAX_WORKERS, 2)}",
    f"replay_buffer_num_workers={MAX_WORKERS}", f"seed={2**32 - 1}", "batch_size=65536",
    "agent.hidden_dim=4096", "exp_name=TEST_RUN", "exp_name=run.v2", "exp_name=2026"])
def test_the_largest_counts_and_plain_names_are_accepted(override):
    validate(config(override))


@pytest.mark.parametrize("name", ["../../..", "..", "a/b", "/tmp/x", "a\\b", "a..b",
                                  "a\nb", "a\x00b"])
def test_an_exp_name_that_would_leave_the_runs_folder_is_refused(name):
    cfg = config()
    cfg.exp_name = name
    with pytest.raises(ConfigError, match=r"^exp_name=.* is invalid: .*set hydra\.run\.dir"):
        validate(cfg)


def test_the_cpu_bound_is_4_per_cpu_of_this_machine_and_keeps_the_originals_commands():
    assert MAX_WORKERS == max(16, 4 * (os.cpu_count() or 1))
    validate(config("replay_buffer_num_workers=5", "num_actors=8"))  # README_PRETRAIN, docs


# ------------------------------------------------------------------- files of the wrong type
def test_a_file_that_is_not_a_snapshot_says_what_a_snapshot_is(tmp_path):
    (tmp_path / "config.yaml").write_text("seed: 1\n")
    np.savez(tmp_path / "arrays.npz", a=np.zeros(3))  # a zip archive, not torch's
    torch.save({"weights": torch.zeros(2)}, tmp_path / "model.pt")  # torch's, not a snapshot
    (tmp_path / "bytes.pt").write_bytes(b"\x80\x04\x95" + bytes(range(200)))
    for name, message in (("config.yaml", "starts with the text 'seed: 1\\n'"),
                          ("arrays.npz", "is a zip archive but not a snapshot"),
                          ("model.pt", "is a PyTorch file but not a snapshot"),
                          ("bytes.pt", "starts with the bytes b'\\x80\\x04")):
        cfg = config(f"snapshot_path={tmp_path / name}", "finetune_snapshot=true")
        with pytest.raises(checkpoint.CheckpointError) as caught:
            validate(cfg)
        assert str(caught.value).startswith("snapshot_path: ") and message in str(caught.value)
        assert "expected the snapshot.pt that python train.py writes" in str(caught.value)
    with pytest.raises(checkpoint.CheckpointError, match="^expl_agent_path: .* is not a snapshot"):
        validate(config(f"expl_agent_path={tmp_path / 'config.yaml'}"))


def test_a_real_snapshot_passes_the_check_without_reading_its_tensors(tmp_path):
    meta = {"frame": 0, "episode": 0, "rng": checkpoint.rng_state()}
    path = checkpoint.save(tmp_path / "snapshot.pt", {"w": torch.zeros(1000)}, meta)
    assert checkpoint.check(tmp_path, "snapshot_path") == path


@pytest.mark.parametrize("content, message", [
    (b"seed: [1, 2\n  bad: : :\n\x00", "is not YAML (expected a YAML file of key: value lines"),
    (b"\x89PNG\r\n\x1a\n\x00", "byte 0x89 at offset 0 is not UTF-8 text"),
    (b"- a\n- b\n", "holds a YAML list, expected a YAML file"),
    (b"a: [1,\n", "as config.yaml): expected the node content, but found '<stream end>' at line 2"),
])
def test_a_config_file_that_is_not_yaml_says_what_it_should_be(tmp_path, content, message):
    (tmp_path / "mine.yaml").write_bytes(content)
    for argv in (["--config-dir", str(tmp_path), "--config-name=mine"],
                 [f"-cp={tmp_path}", "-cn", "mine.yaml"]):
        with pytest.raises(ConfigError, match="^--config-name=mine") as caught:
            check_config_file(argv, ROOT)
        assert message in str(caught.value)


def test_a_yaml_config_file_and_no_config_file_pass(tmp_path):
    (tmp_path / "mine.yaml").write_text("defaults:\n  - config\nseed: 3\n")
    check_config_file(["--config-dir", str(tmp_path), "--config-name", "mine"], ROOT)
    check_config_file(["seed=3"], ROOT)
    check_config_file(["--config-name=absent"], ROOT)  # Hydra says where it looked


# ------------------------------------------------------------------- a refusal writes nothing
@pytest.mark.e2e
def test_train_py_refuses_before_writing_anything(train, tmp_path):
    """Each refusal names its key, exits 2 without a traceback, and leaves no run dir or
    train.log anywhere (the tiny budget only bounds a run the check would have let start)."""
    (tmp_path / "notes.txt").write_text("seed: 1\n")
    tiny = ["num_train_frames=20", "num_seed_frames=20", "eval_every_frames=20",
            "num_eval_episodes=1", "env_spec.length=20", "replay_buffer_num_workers=0",
            "batch_size=8", "progress=false", "save_snapshot=false"]
    for overrides, named in (
            ([f"seed={BIG}"], "seed="), (["seed=1e23"], "seed="),
            (["torch_threads=100000"], "torch_threads="), (["num_actors=100000"], "num_actors="),
            (["exp_name=../../.."], "exp_name="), (["-m", f"seed=1,{BIG}"], "seed="),
            ([f"snapshot_path={tmp_path / 'notes.txt'}", "finetune_snapshot=true"],
             "snapshot_path: "),
            ([f"expl_agent_path={tmp_path / 'notes.txt'}"], "expl_agent_path: ")):
        proc = train(*tiny, *overrides, check=False, timeout=120,
                     extra_env={"CUDA_VISIBLE_DEVICES": ""})
        assert proc.returncode == 2, (overrides, proc.stderr[-2000:])
        assert f"error: {named}" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        written = [p for p in tmp_path.rglob("*") if p.name == "train.log"
                   or re.search(r"_\d{6}$", p.name)]  # a run dir: <exp_name>_<time>
        assert not (tmp_path / "exp_local").exists() and not written, (overrides, written)
