"""End-to-end runs of ``python train.py`` with tiny budgets: the original README commands
(pretraining, guided exploration, finetuning), TensorBoard, W&B offline, resume, bad input."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import PRETRAIN, ROOT, TINY, csv_rows, find_run, run_train, train_env

from ellm_tools.report import build_report

pytestmark = pytest.mark.e2e  # every test here runs train.py





@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """The README's oracle pretraining command, unchanged but for the budget."""
    cwd = tmp_path_factory.mktemp("pretrain")
    run_train(cwd, *PRETRAIN, "exp_name=TEST_RUN", *TINY)
    return find_run(cwd, "TEST_RUN")


def test_pretraining_writes_a_complete_run_dir(pretrained):
    names = {p.name for p in pretrained.iterdir()}
    assert {"config.json", "snapshot.pt", "train.csv", "eval.csv", "lm.csv", "train",
            "eval", "buffer"} <= names
    train_rows = csv_rows(pretrained / "train.csv")
    assert len(train_rows) == 6  # 240 frames of 40-step episodes
    assert int(train_rows[-1]["frame"]) == 240
    eval_rows = csv_rows(pretrained / "eval.csv")
    assert [int(r["frame"]) for r in eval_rows] == [0, 120, 240]  # the original evaluates at 0
    assert {"episode_reward", "score", "episode_length"} <= set(eval_rows[0])
    # Exploration per episode: the cells of a 40-step episode, the captions of its steps.
    for row in train_rows + eval_rows:
        assert 1 <= float(row["coverage"]) <= 41
        assert 0 <= float(row["distinct_captions"]) <= 40
    assert any(float(row["coverage"]) > 1 for row in train_rows)  # epsilon 1: it moves
    assert len((pretrained / "train" / "stats.jsonl").read_text().splitlines()) == 6
    assert len((pretrained / "eval" / "stats.jsonl").read_text().splitlines()) == 3
    assert len(list((pretrained / "buffer").glob("*.npz"))) == 6
    config = json.loads((pretrained / "config.json").read_text())
    assert config["use_goal"] is True and config["env_spec"]["lm_spec"]["lm_class"] == "SimpleOracle"
    lm_rows = csv_rows(pretrained / "lm.csv")
    assert float(lm_rows[-1]["queries"]) > 0
    snapshot = torch.load(pretrained / "snapshot.pt", weights_only=True)
    assert snapshot["meta"]["frame"] == 240 and snapshot["meta"]["episode"] == 6
    log = (pretrained / "train.log").read_text()
    assert "[eval @ 120 frames] achievements/episode" in log
    assert "[eval @ 240 frames] achievements/episode" in log
    assert "trained frames 0-240 in " in log  # the run's wall time


def test_guided_exploration_from_the_pretrained_agent(train, pretrained, tmp_path):
    train("single_goal_eval=True", "use_language_state=sbert", "env_spec.use_sbert=True",
          "use_goal=True", "env_spec.lm_spec.lm_class=SimpleOracle", "train_after_reward=True",
          "decay_after_reward=True", 'env_spec.single_task="attack cow"',
          f"expl_agent_path={pretrained}", "num_train_frames=200", "exp_name=TEST_RUN",
          *TINY[1:])
    out = find_run(tmp_path, "TEST_RUN")
    eval_rows = csv_rows(out / "eval.csv")
    assert "attack_cow" in csv_rows(out / "goals.csv")[0]
    assert len(eval_rows) == 3
    # Its headline is its task: the share of evaluation episodes that did it.
    assert all(0.0 <= float(r["task_success"]) <= 1.0 for r in eval_rows)
    report = build_report([out], tmp_path / "report")
    assert report.scores[0].method == "ELLM-oracle [attack cow], guided"
    assert len(report.scores[0].eval_task_success) == 1
    assert "| task success %, last eval |" in (tmp_path / "report" / "report.md").read_text()


def test_finetuning_from_the_snapshot(train, pretrained, tmp_path):
    train("single_goal_eval=True", "use_language_state=sbert", "env_spec.use_sbert=True",
          "use_goal=True", "env_spec.lm_spec.lm_class=SimpleOracle", "train_after_reward=True",
          "decay_after_reward=True", "finetune_snapshot=True", "agent.train_eps_max=.5",
          "lr=0.00002", 'env_spec.single_task="attack cow"', f"snapshot_path={pretrained}",
          "num_train_frames=200", "exp_name=TEST_RUN", *TINY[1:])
    out = find_run(tmp_path, "TEST_RUN")
    assert out != pretrained
    snapshot = torch.load(out / "snapshot.pt", weights_only=True)
    assert snapshot["meta"]["frame"] == 200  # a fresh run: counters start at 0
    first = csv_rows(out / "train.csv")[0]
    assert float(first["epsilon"]) == pytest.approx(0.5)  # held at train_eps_max
    assert "task_success" in csv_rows(out / "eval.csv")[-1]
    assert "task_success" in csv_rows(out / "reward.csv")[0]  # each training episode's too
    assert build_report([out], tmp_path / "report").scores[0].method == (
        "ELLM-oracle [attack cow], finetuned")


def test_tensorboard_and_wandb_offline(train, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train("use_tb=True", "use_wandb=True", "exp_name=MON", *TINY)
    out = find_run(tmp_path, "MON")
    events = EventAccumulator(str(out / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/episode_reward", "eval/episode_reward", "eval/score", "lm/queries"} <= tags
    assert [e.step for e in events.Scalars("eval/episode_reward")] == [0, 120, 240]
    assert list(out.glob("wandb/offline-run-*/run-*.wandb"))


def test_resume_after_kill_9_continues_the_counters(train, tmp_path):
    args = [*PRETRAIN, "exp_name=KILL", *TINY[:1], "num_train_frames=100000", *TINY[1:]]
    args = [a for a in args if a != "num_train_frames=240"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path,
                            env=train_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    snap = None
    while time.time() < deadline:
        found = list(tmp_path.glob("exp_local/*/KILL_*/snapshot.pt"))
        if found and torch.load(found[0], weights_only=True)["meta"]["frame"] >= 240:
            snap = found[0]
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert snap is not None, "no snapshot appeared"
    out = snap.parent
    killed_meta = torch.load(snap, weights_only=True)["meta"]
    killed_at = killed_meta["frame"]
    # As the Ctrl-C hint and the README say: the run dir, and a longer budget if wanted; the
    # run's own settings (its method, budget schedule, episode length ...) come from the snapshot.
    proc = train(f"snapshot_path={out}", f"num_train_frames={killed_at + 120}")
    assert "resuming with the run's own settings" in proc.stderr + proc.stdout
    assert len(list(tmp_path.glob("exp_local/*/KILL_*"))) == 1  # same run dir
    config = json.loads((out / "config.json").read_text())
    assert (config["eval_every_frames"], config["env_spec"]["length"]) == (120, 40)
    assert config["use_goal"] is True and config["num_train_frames"] == killed_at + 120
    meta = torch.load(snap, weights_only=True)["meta"]
    assert meta["frame"] == killed_at + 120
    eval_frames = [int(r["frame"]) for r in csv_rows(out / "eval.csv")]
    assert eval_frames[-1] == killed_at + 120
    # The resumed envs go on to new worlds instead of replaying the first ones.
    for env in ("train", "eval"):
        assert meta["env_episodes"][env] > killed_meta["env_episodes"][env] >= 1
    # Rows and episodes the killed run logged after its snapshot are not counted twice.
    train_frames = [int(r["frame"]) for r in csv_rows(out / "train.csv")]
    episode_frames = [json.loads(line)["frame"]
                      for line in (out / "train" / "stats.jsonl").read_text().splitlines()]
    eval_episode_frames = [json.loads(line)["frame"]
                           for line in (out / "eval" / "stats.jsonl").read_text().splitlines()]
    for frames in (eval_frames, train_frames, episode_frames):
        assert frames == sorted(set(frames)), frames
    assert eval_episode_frames == sorted(eval_episode_frames)
    assert len(eval_episode_frames) == len(eval_frames)  # one eval episode per evaluation
    # The replay was kept (save_buffer), and with it the texts' embeddings: not encoded again.
    taken = re.search(r"text embeddings: (\d+) taken from .*text_embeddings\.npz",
                      (out / "train.log").read_text())
    assert taken and int(taken.group(1)) > 0


def test_resume_refuses_a_change_that_is_not_the_same_run(train, pretrained, tmp_path):
    run = tmp_path / "copied_run"
    shutil.copytree(pretrained, run)
    before = (run / "train.csv").read_text()
    proc = train(f"snapshot_path={run}", "seed=5", "preset=cpu_small", "num_train_frames=480",
                 check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "seed (snapshot: 1, now: 5)" in proc.stderr  # a key named on the command line
    assert "eval_every_frames (snapshot: 120, now: 5000)" in proc.stderr  # set by its group
    assert "num_train_frames" not in proc.stderr.split("changes")[1].split(". Only")[0]
    assert "finetune_snapshot=True" in proc.stderr and "Traceback" not in proc.stderr
    assert (run / "train.csv").read_text() == before  # nothing ran


# Every key's check is tested in process (test_config.py); here, that train.py stops with the
# message and exit code 2 and no traceback, for a schema check, a game's check and a file.
@pytest.mark.parametrize("override, message", [
    ("num_train_frames=-5", "num_train_frames"),
    ("env_spec.action_space_type=hard", "env_spec.action_space_type"),
    ("snapshot_path=/nonexistent/run", "snapshot_path"),
])
def test_bad_input_fails_before_training_naming_the_key(train, tmp_path, override, message):
    proc = train("exp_name=BAD", *TINY, override, check=False, timeout=120,
                 extra_env={"CUDA_VISIBLE_DEVICES": ""})  # no GPU, whatever the machine
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("exp_local/*/BAD_*/train.csv"))


def test_unknown_key_is_rejected(train, tmp_path):
    proc = train("num_train_frame=10", check=False, timeout=60)
    assert proc.returncode != 0 and "num_train_frame" in proc.stderr
    # Hydra's own hint, followed: a key added with + that nothing reads never starts a run.
    for added, closest in (("+num_train_frame=100", "num_train_frames"),
                           ("+env_spec.lengthh=3", "env_spec.length")):
        proc = train(added, check=False, timeout=60)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"did you mean {closest}?" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "exp_local").exists()


def test_incompatible_checkpoint_names_the_keys(train, pretrained, tmp_path):
    for source in (f"snapshot_path={pretrained}", f"expl_agent_path={pretrained}"):
        proc = train("env_spec.lm_spec.lm_class=SimpleOracle", source, "finetune_snapshot=True",
                     "use_goal=False", "exp_name=MISMATCH", *TINY, check=False, timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "use_goal=False, but the agent at" in proc.stderr
        assert "was trained with use_goal=True" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "exp_local").exists()  # a failed start leaves no run dir


def readme_row(what: str) -> list[str]:
    """The README's options for ``what`` (a row of its training table), as a shell splits them."""
    row = next(line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith(f"| {what}"))
    return shlex.split(row.split("`")[1])


@pytest.mark.parametrize("what", ["finetune a pretrained agent on a task", "guided exploration"])
def test_the_readmes_finetune_and_guide_commands_run_as_written(train, pretrained, tmp_path,
                                                               what):
    options = [o.replace("RUN_DIR", str(pretrained)) for o in readme_row(what)]
    train(*options, "exp_name=FROM_README", *TINY[1:], "num_train_frames=120")
    out = find_run(tmp_path, "FROM_README")
    config = json.loads((out / "config.json").read_text())
    assert (config["use_goal"], config["use_language_state"]) == (True, "sbert")  # the snapshot's
    assert "the pretrained agent's structure: use_goal=True" in (out / "train.log").read_text()


@pytest.mark.parametrize("field, value, expected", [
    ("lm_spent", -1e9, "a finite number >= 0"),
    ("lm_spent", float("inf"), "a finite number >= 0"),
    ("lm_spent", float("nan"), "a finite number >= 0"),
    ("lm_spent", "0", "a finite number >= 0"),
    ("frame", -5, "a whole number >= 0"),
    ("episode", 1.5, "a whole number >= 0"),
    ("cumulative_reward", float("nan"), "a finite number"),
    ("lm_metrics", {"api_calls": -3.0}, "finite numbers >= 0"),
    ("actor_env_episodes", ["x"], "whole numbers >= 0"),
    ("replay_episodes", -1, "a whole number >= 0"),
    ("rng", {"python": []}, "random streams"),
    ("first_reward_frame", 10 ** 9, "at most the snapshot's frame"),
])
def test_a_tampered_snapshot_is_refused_naming_the_field(train, pretrained, tmp_path, field,
                                                          value, expected):
    data = torch.load(pretrained / "snapshot.pt", weights_only=True)
    data["meta"][field] = value
    tampered = tmp_path / "tampered.pt"
    torch.save(data, tampered)
    proc = train(f"snapshot_path={tampered}", *PRETRAIN, "exp_name=TAMPERED", *TINY,
                 check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"meta field {field!r}" in proc.stderr and expected in proc.stderr
    assert str(tampered) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("exp_local/*/TAMPERED_*/train.csv"))  # before training


def test_lm_outage_mid_run_does_not_stop_training(train, tmp_path):
    """A real `openai` client against a local server that answers, then fails every request."""
    try:
        from tests.openai_test_server import OpenAITestServer, Reply
    except ImportError:
        from openai_test_server import OpenAITestServer, Reply

    answered = []

    def responder(body):
        if len(answered) < 5:
            answered.append(body)
            return Reply.bullets("chop tree", "attack cow")
        return Reply.error(500)

    with OpenAITestServer() as server:
        server.responder = responder
        train("env_spec.use_sbert=True", "use_goal=True", "use_language_state=sbert",
              "env_spec.lm_spec.lm_class=GPTLanguageModel", "env_spec.lm_spec.lm=test-model",
              f"env_spec.lm_spec.base_url={server.base_url}", "env_spec.lm_spec.max_retries=1",
              "env_spec.lm_spec.timeout=2", "+env_spec.lm_spec.backoff=0.0",
              "exp_name=OUTAGE", *TINY, extra_env={"OPENAI_API_KEY": ""})
        failed_requests = len(server.requests) - len(answered)
    out = find_run(tmp_path, "OUTAGE")
    lm = csv_rows(out / "lm.csv")
    assert len(answered) == 5 and failed_requests > 0
    assert float(lm[-1]["api_errors"]) > 0
    assert float(lm[-1]["api_calls"]) == len(answered) + failed_requests
    assert [int(r["frame"]) for r in csv_rows(out / "eval.csv")] == [0, 120, 240]


def test_sweep_with_a_legacy_key_override_stores_and_prints_no_key(train, tmp_path):
    """`python train.py -m seed=1,2 ... env_spec.lm_spec.openai_key=KEY` (the original README's
    form): both jobs run, no file or console line shows the key, and a server other than
    OpenAI's never receives it (it is an OpenAI key; env_spec.lm_spec.api_key_env names
    another endpoint's)."""
    try:
        from tests.openai_test_server import OpenAITestServer, Reply
    except ImportError:
        from openai_test_server import OpenAITestServer, Reply

    secret = "sk-test-" + "7f3a9c" * 4
    with OpenAITestServer() as server:
        server.default = Reply.bullets("chop tree")
        proc = train("-m", "seed=1,2", "env_spec.use_sbert=True", "use_goal=True",
                     "env_spec.lm_spec.lm_class=GPTLanguageModel",
                     "env_spec.lm_spec.lm=test-model",
                     f"env_spec.lm_spec.base_url={server.base_url}",
                     f"env_spec.lm_spec.openai_key={secret}", "exp_name=SWEEP",
                     "num_train_frames=80", "num_seed_frames=40", "eval_every_frames=80",
                     *[a for a in TINY if a.split("=")[0] not in
                       ("num_train_frames", "num_seed_frames", "eval_every_frames")],
                     extra_env={"OPENAI_API_KEY": "", "ELLM_LM_API_KEY": ""})
        auth = {r.authorization for r in server.requests}
    assert auth == {"Bearer no-key-needed"}
    (sweep,) = tmp_path.glob("exp_local/*/SWEEP_*")
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["0_seed1", "1_seed2"]
    for job in jobs:
        assert [int(r["frame"]) for r in csv_rows(sweep / job / "eval.csv")] == [0, 80]
    assert secret not in proc.stdout + proc.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_the_smoke_preset_compares_two_methods(tmp_path):
    # Its three minutes are a measurement (README), not a timing assertion: a loaded machine
    # must not fail the suite.
    proc = run_train(tmp_path, "-m", "preset=smoke", "method=ellm,rnd", "exp_name=smoke",
                     timeout=900)
    report = build_report([find_run(tmp_path, "smoke")], tmp_path / "report")
    assert sorted(s.method for s in report.scores) == ["ELLM-oracle", "RND"]
    assert all(len(s.eval_achievements) == 1 for s in report.scores), proc.stdout[-2000:]
