"""`python -m llm_in_the_loop.llf_run` end to end: the LLM policy against a scripted
OpenAI-compatible server and the scripted reference write run directories that `ellm_tools.report`
reads beside the DQN methods."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import csv_rows, find_run, run_entry
from openai_test_server import Reply

from ellm_tools.report import build_report
from text_crafter import load_stats

pytestmark = pytest.mark.e2e


def run_llf(cwd: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return run_entry("llm_in_the_loop.llf_run", cwd, *overrides, check=False, timeout=300)


def test_llm_and_scripted_runs_are_read_by_the_report(server, tmp_path):
    answers = iter(["move left", "chop tree", "no idea, sorry", "Action: move up"] * 100)

    def responder(body: dict[str, Any]) -> Reply:
        return Reply(next(answers))

    server.responder = responder
    llm = run_llf(tmp_path, "exp_name=LLM", "policy=llm", "num_episodes=2", "history=2",
                  "env_spec.length=12", f"env_spec.lm_spec.base_url={server.base_url}",
                  "env_spec.lm_spec.lm=test-model", "env_spec.lm_spec.endpoint=completions",
                  "progress_every_s=0")
    assert llm.returncode == 0, llm.stderr[-3000:]
    # Progress within an episode, at the pace asked (0: every step), with the LM's use so far.
    out = llm.stdout + llm.stderr
    assert "episode 1/2: step 5, return " in out and "; LM so far: 5 calls (" in out
    assert "episode 2/2: step 11, return " in out and "episode 2/2: step 12," not in out
    scripted = run_llf(tmp_path, "exp_name=SCRIPTED", "policy=scripted", "num_episodes=2",
                       "env_spec.feedback_type=fp", "env_spec.length=12")
    assert scripted.returncode == 0, scripted.stderr[-3000:]
    assert "Plot it: python -m ellm_tools.report" in scripted.stdout

    run = find_run(tmp_path, "LLM")
    config = json.loads((run / "config.json").read_text())
    assert (config["method"], config["game"], config["num_train_frames"]) == (
        "llm-policy", "crafter", 0)
    assert config["env_spec"]["lm_spec"]["lm"] == "test-model"
    episodes = load_stats(run / "eval" / "stats.jsonl")
    assert len(episodes) == 2 and all(ep["frame"] == 0 and ep["length"] == 12 for ep in episodes)
    assert "achievement_collect_wood" in episodes[0] and "success" in episodes[0]
    per_episode = csv_rows(run / "llf.csv")
    assert [int(r["frame"]) for r in per_episode] == [12, 24]
    assert sum(float(r["api_calls"]) for r in per_episode) == 24 == len(server.requests)
    assert sum(float(r["parse_errors"]) for r in per_episode) == 6  # one answer in four
    assert float(csv_rows(run / "lm.csv")[-1]["completion_tokens"]) == 240

    report = build_report([tmp_path / "exp_local"], tmp_path / "report")
    methods = {s.method: s for s in report.scores}
    assert set(methods) == {"LLM policy test-model, feedback a", "Scripted policy (follows fp)"}
    assert all(len(s.eval_score) == 1 and s.eval_frames == [0] for s in methods.values())
    assert [u.method for u in report.lm] == ["LLM policy test-model, feedback a"]
    assert report.lm[0].api_calls_per_1m == pytest.approx(1e6)
    text = report.summary.read_text()
    assert "evaluation only (24 env steps)" in text


def test_housekeep_run_and_a_rejected_config(tmp_path):
    proc = run_llf(tmp_path, "exp_name=HK", "policy=scripted", "num_episodes=1",
                   "env_spec.name=llf-housekeep-v0", "env_spec.feedback_type=fp",
                   "env_spec.housekeep_ep_num=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = find_run(tmp_path, "HK")
    (episode,) = load_stats(run / "eval" / "stats.jsonl")
    assert episode["success"] == 1 and episode["rearrange_success"] == 1.0
    report = build_report([run], tmp_path / "report")
    assert report.runs[0].method == "Housekeep: Scripted policy (follows fp)"
    assert "housekeep_rearrange_success" in report.figures

    bad = run_llf(tmp_path, "exp_name=BAD", "policy=scripted", "env_spec.feedback_type=a")
    assert bad.returncode == 2
    assert "env_spec.feedback_type=a is invalid with policy=scripted" in bad.stderr
    assert not list(tmp_path.glob("exp_local/*/BAD_*"))
