"""`python train.py` with `GPTLanguageModel` against a scripted OpenAI-compatible server.

One real training run checks what only a whole run can show: a state whose LM query fails after
every retry gets no goals, the error is counted in the logs and training goes on; and no API key
(environment or command line) reaches any file the run writes, its cache, or its output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import csv_rows
from openai_test_server import Reply

from ellm.run import checkpoint
from ellm_tools.report.runs import method_name

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {"OPENAI_API_KEY": "sk-env-openai-SECRET-1", "ELLM_LM_API_KEY": "env-local-SECRET-2"}
CLI_SECRET = "sk-cli-legacy-SECRET-3"
FRAMES = 80

pytestmark = pytest.mark.e2e  # every test here runs train.py



def prompt_of(body: dict[str, Any]) -> str:
    return json.dumps(body.get("messages", body.get("prompt")), sort_keys=True)


def test_failed_queries_give_no_goals_training_goes_on_and_no_key_is_written(train, server, tmp_path):
    doomed: list[str] = []  # the first prompt the run sends fails on every attempt

    def responder(body: dict[str, Any]) -> Reply:
        prompt = prompt_of(body)
        if not doomed:
            doomed.append(prompt)
        if prompt == doomed[0]:
            return Reply.error(500)
        return Reply.bullets("chop tree", "drink water")

    server.responder = responder
    server.models = ["served-model"]  # a local server of one model, not the configured name
    overrides = [
        "exp_name=LMRUN", "use_goal=True", "env_spec.use_sbert=True",
        "use_language_state=sbert", "use_tb=True",
        "env_spec.lm_spec.lm_class=GPTLanguageModel", "env_spec.lm_spec.lm=test-model",
        f"env_spec.lm_spec.base_url={server.base_url}", "env_spec.lm_spec.max_retries=2",
        "env_spec.lm_spec.timeout=10", "+env_spec.lm_spec.backoff=0",
        "env_spec.lm_spec.novelty_bonus=False", f"openai_key={CLI_SECRET}",
        f"num_train_frames={FRAMES}", "num_seed_frames=40", f"eval_every_frames={FRAMES}",
        "num_eval_episodes=1", "env_spec.length=40", "replay_buffer_num_workers=0",
        "batch_size=8", "progress=false",
    ]
    proc = train(*overrides, extra_env=SECRETS)
    (run,) = tmp_path.glob("exp_local/*/LMRUN_*")

    # Training went on to the end, and evaluated.
    assert int(csv_rows(run / "train.csv")[-1]["frame"]) == FRAMES
    assert [int(r["frame"]) for r in csv_rows(run / "eval.csv")] == [0, FRAMES]
    # The failing state was asked max_retries + 1 times per visit, then given up on.
    sent = [prompt_of(r.body) for r in server.requests]
    assert sent.count(doomed[0]) > 0 and sent.count(doomed[0]) % 3 == 0
    assert "giving up after 3 attempt(s)" in proc.stdout + proc.stderr  # the logged warning
    lm = csv_rows(run / "lm.csv")[-1]
    assert float(lm["api_errors"]) >= 1
    assert float(lm["retries"]) == 2 * float(lm["api_errors"])  # only failures were retried
    assert float(lm["queries"]) > float(lm["api_errors"])
    assert float(lm["cache_hits"]) > 0
    # The closing lines say what the LM did and cost.
    assert re.search(rf"LM served-model: {float(lm['queries']):.0f} queries, "
                     rf"{float(lm['api_calls']):.0f} API calls, {float(lm['cache_hits']):.0f} "
                     r"cache hits, \d+ cache misses; \$0\.0000 spent of its \$1\.00 budget\.",
                     proc.stdout), proc.stdout[-1500:]
    # That step had no goals; the others had the server's (novelty filter off), written as
    # the original wrote them in the paper setting.
    strings = (run / "buffer" / "strings.jsonl").read_text().splitlines()
    assert json.dumps("Your goal is: .") in strings
    assert json.dumps("Your goal is: chop tree drink water.") in strings

    # The local server got the local key, never the OpenAI one.
    assert {r.authorization for r in server.requests} == {f"Bearer {SECRETS['ELLM_LM_API_KEY']}"}
    # No key in any file the run wrote (run dir, TensorBoard, buffer, snapshot, LM cache) ...
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "config.json" for p in files)
    assert any(p.name == "snapshot.pt" for p in files)
    assert any(p.name.startswith("lm_cache.sqlite3") for p in files)
    assert any("tfevents" in p.name for p in files)
    for secret in (*SECRETS.values(), CLI_SECRET):
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"a key leaked into {path}"
        # ... nor in what it printed or logged.
        assert secret not in proc.stdout and secret not in proc.stderr
    config = json.loads((run / "config.json").read_text())
    assert config["openai_key"] is None  # train.py takes the legacy key out of argv
    assert config["env_spec"]["lm_spec"]["openai_key"] is None
    # The run records the model that answered, and the report names the method after it.
    assert config["method"] == "ellm"
    assert config["env_spec"]["lm_spec"]["lm"] == "served-model"
    assert {r.body["model"] for r in server.requests} == {"served-model"}
    assert method_name(config) == "ELLM-served-model"
    assert checkpoint.load(run / "snapshot.pt", "snapshot")[1]["config"]["env_spec"][
        "lm_spec"]["lm"] == "served-model"
