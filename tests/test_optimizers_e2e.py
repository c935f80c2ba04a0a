"""`python -m llm_in_the_loop.policy_search_run` and `code_policy_run` end to end against a
scripted OpenAI-compatible server and as references; `ellm_tools.report` reads their run directories."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import csv_rows, find_run, run_entry
from openai_test_server import Reply

from ellm_tools.report import build_report

pytestmark = pytest.mark.e2e


def run(cwd: Path, entry: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python -m llm_in_the_loop.ENTRY OVERRIDES`` in ``cwd``."""
    return run_entry(f"llm_in_the_loop.{entry}", cwd, *overrides, check=False, timeout=300)


def test_policy_search_runs_and_the_report(server, tmp_path):
    answers = iter(["w0=0.5, w1=3", "no idea", "w0=0.1, w1=5.5", "w0=20, w1=5"] * 10)
    server.responder = lambda body: Reply(next(answers))
    llm = run(tmp_path, "policy_search_run", "exp_name=LLM", "iterations=8",
              "warmup_episodes=3", "eval_every=4", "num_eval_episodes=2",
              f"env_spec.lm_spec.base_url={server.base_url}", "env_spec.lm_spec.lm=test-model",
              "env_spec.lm_spec.endpoint=completions", "progress_every_s=0", "reasks=0")
    assert llm.returncode == 0, llm.stderr[-3000:]
    assert "Plot it: python -m ellm_tools.report" in llm.stdout
    # Progress at the pace asked (0: after every episode), warm-up and evaluations included.
    out = llm.stdout + llm.stderr
    assert "1/11 training episodes played (warm-up), best return so far " in out
    assert "4/11 training episodes played (proposal 1/8), best return so far " in out
    assert "11/11 training episodes played (best setting: evaluation episode 2/2)" in out
    d = find_run(tmp_path, "LLM")
    config = json.loads((d / "config.json").read_text())
    assert (config["method"], config["game"], config["num_train_episodes"]) == (
        "policy-search-llm", "mountaincar", 11)
    assert config["method_label"] == "Policy search, LLM test-model"
    rows = csv_rows(d / "iteration.csv")
    assert [int(float(r["iteration"])) for r in rows] == [0, 0, 0, *range(1, 9)]
    assert [float(r["warmup"]) for r in rows] == [1.0] * 3 + [0.0] * 8
    assert [float(r["fallback"]) for r in rows[3:]] == [0, 1, 0, 0] * 2
    assert [float(r["clipped"]) for r in rows[3:]] == [0, 0, 0, 1] * 2
    assert [float(r["param_w1"]) for r in rows[3:6]] == [3.0, float(rows[4]["param_w1"]), 5.5]
    assert [float(r["lm_api_calls"]) for r in rows] == [0.0] * 3 + [1.0] * 8
    assert sum(float(r["lm_completion_tokens"]) for r in rows) == 80
    assert len(server.requests) == 8
    evals = csv_rows(d / "eval.csv")
    assert [int(float(r["episodes"])) for r in evals] == [7, 11]
    proposals = [json.loads(line) for line in (d / "proposals.jsonl").read_text().splitlines()]
    assert [p["status"] for p in proposals[3:7]] == ["ok", "unparsable", "ok", "clipped"]
    best = json.loads((d / "best.json").read_text())
    assert best["return"] == max(float(r["return"]) for r in rows)
    own = [float(r["return"]) for r in rows if r["warmup"] == r["fallback"] == "0.0"]
    assert len(own) == 6 and best["best_proposed"]["return"] == max(own)

    for name, env, extra in (("POLE", "CartPole-v1", "env_spec.max_episode_steps=50"),
                             ("CRAFT", "llf-crafter-v0", "env_spec.length=30")):
        ref = run(tmp_path, "policy_search_run", f"exp_name={name}", "optimizer=random",
                  "iterations=3", "warmup_episodes=1", "num_eval_episodes=1",
                  f"env_spec.name={env}", extra)
        assert ref.returncode == 0, ref.stderr[-3000:]
    crafter = json.loads((find_run(tmp_path, "CRAFT") / "config.json").read_text())
    assert crafter["env_spec"]["single_task"] == "make wood pickaxe"

    report = build_report([tmp_path / "exp_local"], tmp_path / "report")
    returns = {r.method: r for r in report.returns}
    assert set(returns) == {"MountainCar: Policy search, LLM test-model",
                            "CartPole: Policy search, random settings",
                            "Policy search, random settings [make wood pickaxe]"}
    assert returns["MountainCar: Policy search, LLM test-model"].episodes == [11]
    assert {"mountaincar_return", "mountaincar_eval_return", "cartpole_return",
            "crafter_return"} <= set(report.figures)
    assert report.scores == []  # no Crafter score table for a policy search
    assert [u.method for u in report.lm] == ["MountainCar: Policy search, LLM test-model"]
    figure = json.loads((tmp_path / "report" / "mountaincar_return.json").read_text())
    assert figure["xlabel"] == "training episodes"
    assert figure["series"][0]["frames"] == list(range(1, 12))
    text = report.summary.read_text()
    assert "## Return against episodes" in text and "complete (11 / 11 episodes)" in text
    assert "Achievements unlocked per episode" not in text


def code_answers(body: dict[str, Any]) -> Reply:
    """OptoPrime's requests: raising code for the starting code, then the expert-like
    controller once the code raised (or has succeeded)."""
    try:
        from tests.test_code_policy import GOOD_CODE, RAISING_CODE
    except ImportError:  # tests/ itself on sys.path
        from test_code_policy import GOOD_CODE, RAISING_CODE
    text = json.dumps(body)
    code = GOOD_CODE if "velocity" in text or "task done" in text else RAISING_CODE
    return Reply(json.dumps({"reasoning": "r", "suggestion": {"__code0": code}}))


def test_code_policy_runs_and_the_report(server, tmp_path):
    for module in ("opto", "metaworld"):
        pytest.importorskip(module, reason="needs the optim extra: pip install -e '.[optim]'")
    server.responder = code_answers
    llm = run(tmp_path, "code_policy_run", "exp_name=MW", "iterations=4", "eval_every=2",
              "num_eval_episodes=2", "env_spec.horizon=10", "feedback_steps=2",
              f"env_spec.lm_spec.base_url={server.base_url}", "env_spec.lm_spec.lm=test-model",
              "progress_every_s=0")
    assert llm.returncode == 0, llm.stderr[-3000:]
    assert "evaluation after 2 iterations: episode 1/2; " in llm.stdout + llm.stderr
    d = find_run(tmp_path, "MW")
    rows = csv_rows(d / "iteration.csv")
    assert [float(r["code_error"]) for r in rows] == [0, 1, 0, 0]
    assert [float(r["updated"]) for r in rows] == [1, 1, 0, 0]
    assert [float(r["kept"]) for r in rows] == [0, 0, 1, 1]
    assert [float(r["success"]) for r in rows] == [0, 0, 1, 1]
    assert all(float(r["lm_api_calls"]) == 1 for r in rows)
    assert [float(r["success_rate"]) for r in csv_rows(d / "eval.csv")] == [1.0, 1.0]
    codes = [json.loads(line) for line in (d / "codes.jsonl").read_text().splitlines()]
    assert "Your code raised an error at step 1" in codes[1]["feedback"]
    assert "goal" in (d / "policy.py").read_text()
    first = server.requests[0].body["messages"][1]["content"]
    assert "#Feedback" in first and "The expert would now send the hand to" in first

    expert = run(tmp_path, "code_policy_run", "exp_name=EXPERT", "optimizer=expert",
                 "iterations=2", "num_eval_episodes=1", "env_spec.horizon=10")
    assert expert.returncode == 0, expert.stderr[-3000:]
    server.responder = lambda body: Reply("Let me think about it.")
    crafter = run(tmp_path, "code_policy_run", "exp_name=CRAFT", "iterations=2",
                  "num_eval_episodes=1", "env_spec.name=llf-crafter-v0", "env_spec.length=10",
                  f"env_spec.lm_spec.base_url={server.base_url}",
                  "env_spec.lm_spec.lm=test-model")
    assert crafter.returncode == 0, crafter.stderr[-3000:]
    rows = csv_rows(find_run(tmp_path, "CRAFT") / "iteration.csv")
    assert [float(r["unparsable"]) for r in rows] == [1, 1]
    assert [float(r["steps"]) for r in rows] == [10, 10]  # "do nothing" for the whole episode

    report = build_report([tmp_path / "exp_local"], tmp_path / "report")
    methods = {r.method for r in report.returns}
    assert methods == {"Meta-World: Code as policy (OptoPrime), LLM test-model",
                       "Meta-World: Scripted expert (code-policy reference)",
                       "Code as policy (OptoPrime), LLM test-model [make wood pickaxe]"}
    assert {"metaworld_return", "metaworld_eval_return", "crafter_return"} <= set(
        report.figures)


@pytest.mark.parametrize(("entry", "overrides", "message"), [
    ("code_policy_run", ["optimizer=expert", "env_spec.name=llf-crafter-v0"],
     "optimizer=expert is for metaworld-pick-place-v3"),
    ("code_policy_run", ["env_spec.horizon=60"], "more than Meta-World's 500"),
    ("policy_search_run", ["env_spec.single_task=place crafting table"],
     "env_spec.single_task is for llf-crafter-v0"),
    ("policy_search_run", ["param_range=[3,1]"], "param_range=[3, 1] is invalid"),
    ("policy_search_run", ["param_range=[-7,7]", "warmup_range=[-8,3]"],
     "warmup_range [-8, 3] must lie within the search range [-7, 7]"),
])
def test_a_rejected_config_leaves_no_directory(tmp_path, entry, overrides, message):
    proc = run(tmp_path, entry, "exp_name=BAD", *overrides)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert not list(tmp_path.glob("exp_local/*/BAD_*"))


@pytest.mark.e2e
def test_code_policy_runs_with_sandbox_none_as_the_docs_write_it(tmp_path):
    # Hydra reads every folder beside an entry's config as a group: with the config beside the
    # sandbox package, sandbox=none was refused as "Could not override 'sandbox'".
    pytest.importorskip("opto", reason="needs Trace: see docs/optimizers.md, Install")
    proc = run(tmp_path, "code_policy_run", "sandbox=none", "exp_name=NONE", "iterations=1",
               "num_eval_episodes=1", "env_spec.name=llf-crafter-v0", "env_spec.length=5",
               "env_spec.lm_spec.dummy_lm=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "policy code runs WITHOUT OS isolation" in proc.stdout + proc.stderr
    d = find_run(tmp_path, "NONE")
    assert json.loads((d / "config.json").read_text())["sandbox"] == "none"
    assert [float(r["steps"]) for r in csv_rows(d / "iteration.csv")] == [5]
