"""`python train.py env_spec.name=Craftax-Classic-v1 ...`: the Craftax engine's front door, its
records, resume, the LLM's goal table against a local OpenAI-compatible server, and the seeds
sharded over two (forced) CPU devices; each run is tiny, and compiles its loop once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import csv_rows, run_train
from openai_test_server import Reply

from ellm_tools.report.runs import load_runs, method_name

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINY = ["env_spec.name=Craftax-Classic-v1", "craftax.num_envs=8", "craftax.num_steps=8",
        "craftax.hidden=32", "craftax.updates_per_chunk=2", "craftax.minibatches=2",
        "craftax.reset_worlds=2", "num_train_frames=256", "eval_every_frames=128",
        "num_eval_episodes=2", "env_spec.length=30", "progress_every_s=0"]


def _run_dir(cwd: Path, name: str) -> Path:
    (found,) = sorted(cwd.glob(f"exp_local/*/{name}_*"))
    return found


def test_two_seeds_train_write_their_records_resume_and_report(tmp_path):
    proc = run_train(tmp_path, *TINY, "method=ellm", "seeds=2", "exp_name=CX", "use_tb=True")
    run = _run_dir(tmp_path, "CX")
    assert "Craftax run done: ellm on Craftax-Classic-v1, 2 seed(s) x 256 frames" in proc.stdout
    for seed in (1, 2):
        seed_dir = run / f"seed{seed}"
        config = json.loads((seed_dir / "config.json").read_text())
        assert config["seed"] == seed and config["method"] == "ellm"
        assert config["engine"] == "craftax" and config["goal_source"] == "oracle"
        assert config["code_commit"]  # a checkout: the commit the run ran
        evals = csv_rows(seed_dir / "eval.csv")
        assert [int(r["frame"]) for r in evals] == [0, 128, 256]
        for key in ("episode_reward", "achievements_without_wake_up", "score", "coverage"):
            assert key in evals[-1]
        assert float(evals[-1]["coverage"]) > 0
        rates = csv_rows(seed_dir / "achievements.csv")[-1]
        assert "collect_wood" in rates and "wake_up" in rates
        episodes = [json.loads(line) for line in
                    (seed_dir / "eval" / "stats.jsonl").read_text().splitlines()]
        assert len(episodes) == 6 and all(e["length"] <= 30 for e in episodes)
        assert [int(r["frame"]) for r in csv_rows(seed_dir / "train.csv")] == [128, 256]
        assert list((seed_dir / "tb").glob("events*"))
    assert (run / "snapshot.npz").exists()

    # Resume: the run continues as itself to the longer budget, no frame written twice.
    run_train(tmp_path, *TINY[:-4], "num_train_frames=384", "eval_every_frames=128",
              "num_eval_episodes=2", "env_spec.length=30", "method=ellm", "seeds=2",
              "exp_name=CX", f"snapshot_path={run}")
    for seed in (1, 2):
        frames = [int(r["frame"]) for r in csv_rows(run / f"seed{seed}" / "train.csv")]
        assert frames == [128, 256, 384]
        assert [int(r["frame"]) for r in csv_rows(run / f"seed{seed}" / "eval.csv")] == [
            0, 128, 256, 384]

    # The report reads the run as its two seeds, labelled as Craftax runs.
    runs = load_runs([run])
    assert sorted(r.path.name for r in runs) == ["seed1", "seed2"]
    assert {method_name(r.config) for r in runs} == {"Craftax: ELLM-oracle"}


@pytest.mark.parametrize("overrides, named", [
    (["env_spec.name=Craftax-Classic-v1", "batch_size=32"], "batch_size"),
    (["env_spec.name=Craftax-Classic-v1", "agent=dqn"], "agent"),
    (["env_spec.name=Craftax-Classic-v1", "agent.lr=0.1"], "agent.lr"),
    (["env_spec.name=Craftax-Classic-v1", "method=apt"], "method=apt"),
    (["craftax.num_envs=8"], "craftax.num_envs"),
    (["method=e3b"], "method=e3b"),
    (["env_spec.name=Craftax-Classic-v1", "craftax.minibatches=3"], "craftax.minibatches"),
])
def test_a_key_of_the_other_engine_stops_the_run_before_anything_is_written(tmp_path, overrides,
                                                                            named):
    proc = run_train(tmp_path, *overrides, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert named in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "exp_local").exists()


def test_an_llm_fills_the_goal_table_between_chunks_without_stalling_the_loop(tmp_path,
                                                                             server):
    server.models = ["goal-model"]
    server.responder = lambda body: Reply.bullets("chop tree", "drink water")
    run_train(tmp_path, *TINY, "method=ellm", "exp_name=LLM",
              "env_spec.lm_spec.lm_class=GPTLanguageModel", "env_spec.lm_spec.lm=goal-model",
              f"env_spec.lm_spec.base_url={server.base_url}",
              "env_spec.lm_spec.max_in_flight=2")
    run = _run_dir(tmp_path, "LLM")
    lm = csv_rows(run / "seed1" / "lm.csv")[-1]
    assert float(lm["api_calls"]) > 0 and len(server.requests) == float(lm["api_calls"])
    assert float(lm["table_entries"]) > 0
    # Every state before the first answer ran on fallback goals, and the records say how many.
    assert 0 < float(lm["fallback_share"]) <= 1
    config = json.loads((run / "seed1" / "config.json").read_text())
    assert config["goal_source"] == "llm"


def test_an_llm_that_is_down_never_holds_the_loop(tmp_path):
    proc = run_train(tmp_path, *TINY, "method=ellm", "exp_name=DOWN",
                     "env_spec.lm_spec.lm_class=GPTLanguageModel", "env_spec.lm_spec.lm=m",
                     "env_spec.lm_spec.base_url=http://127.0.0.1:9/v1",
                     "env_spec.lm_spec.timeout=1", "env_spec.lm_spec.max_retries=0")
    assert "Craftax run done" in proc.stdout
    lm = csv_rows(_run_dir(tmp_path, "DOWN") / "seed1" / "lm.csv")[-1]
    assert float(lm["fallback_share"]) == 1.0 and float(lm["table_entries"]) == 0
    assert "100.0% of steps ran on fallback goals" in proc.stdout


def test_seeds_shard_over_two_devices(tmp_path):
    proc = run_train(tmp_path, *TINY, "method=rnd", "seeds=2", "exp_name=SHARD",
                     "use_wandb=true",
                     extra_env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert "2 seeds sharded over 2 devices" in proc.stdout + proc.stderr
    run = _run_dir(tmp_path, "SHARD")
    # One W&B run per seed, side by side in one process.
    assert len({p.parent for p in tmp_path.rglob("*.wandb")}) == 2
    for seed in (1, 2):
        assert [int(r["frame"]) for r in csv_rows(run / f"seed{seed}" / "train.csv")] == [
            128, 256]
        assert "bonus_loss" in csv_rows(run / f"seed{seed}" / "train.csv")[-1]


@pytest.mark.timeout(1500)  # three runs, each compiling its own loop
def test_a_pretrained_agent_is_finetuned_on_the_game_reward_and_resumes_as_itself(tmp_path):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ellm.craftax.pqn import QNetwork

    run_train(tmp_path, *TINY, "method=ellm", "seeds=2", "exp_name=PRE")
    pre = _run_dir(tmp_path, "PRE")
    fine = [*TINY[:6], "env_spec.length=30", "progress_every_s=0", "method=extrinsic",
            "seeds=2", "finetune_snapshot=True", f"snapshot_path={pre}"]

    # Nothing to train: the run only loads, evaluates and snapshots, so its weights are the
    # pretrained run's last ones, seed for seed.
    run_train(tmp_path, *fine, "num_train_frames=0", "eval_every_frames=128",
              "num_eval_episodes=2", "exp_name=FT")
    run = _run_dir(tmp_path, "FT")
    n = len(jax.tree_util.tree_leaves(QNetwork(17, 32, 2).init(
        jax.random.PRNGKey(0), jnp.zeros((1, 4)), jnp.zeros((1, 2)))))
    with np.load(pre / "snapshot.npz") as a, np.load(run / "snapshot.npz") as b:
        for i in range(n):
            np.testing.assert_array_equal(a[f"leaf_{i:04d}"], b[f"leaf_{i:04d}"])
        assert not np.array_equal(a[f"leaf_{n:04d}"], b[f"leaf_{n:04d}"])  # a fresh optimiser
    config = json.loads((run / "seed2" / "config.json").read_text())
    assert config["method"] == "extrinsic" and config["goal_source"] is None
    assert config["pretrained"]["method"] == "ellm" and config["pretrained"]["goal_input"]
    assert config["pretrained"]["seeds"] == [1, 2] and config["pretrained"]["frame"] == 256
    assert config["pretrained"]["goal_dim"] == 24  # the 24 goals' span, as ELLM embedded them
    assert config["pretrained"]["code_commit"] == config["code_commit"]
    assert {method_name(r.config) for r in load_runs([run])} == {
        "Craftax: Extrinsic reward, finetuned from ELLM-oracle"}

    # Resumed with a budget, the finetuned run trains with the goal input it was built with.
    proc = run_train(tmp_path, *fine[:-2], "num_train_frames=256", "eval_every_frames=128",
                     "num_eval_episodes=2", "exp_name=FT", f"snapshot_path={run}")
    assert "Craftax run done: extrinsic on Craftax-Classic-v1, 2 seed(s) x 256 frames" in \
        proc.stdout
    assert [int(r["frame"]) for r in csv_rows(run / "seed1" / "eval.csv")] == [0, 128, 256]
    assert json.loads((run / "seed1" / "config.json").read_text())["pretrained"]["goal_input"]


@pytest.mark.parametrize("extra, named", [
    (["finetune_snapshot=True"], "finetune_snapshot=True needs snapshot_path"),
    (["finetune_snapshot=True", "snapshot_path=nowhere"], "snapshot_path=nowhere"),
    (["finetune_snapshot=True", "snapshot_path=x", "method=random"], "does not learn"),
    (["snapshot_path=nowhere"], "no snapshot.npz in"),
])
def test_a_finetune_without_pretrained_weights_stops_before_anything_is_written(tmp_path, extra,
                                                                               named):
    proc = run_train(tmp_path, *TINY, "method=extrinsic", *extra, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert named in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("exp_local/*/*"))
