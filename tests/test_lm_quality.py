"""`python -m ellm_tools.lm_quality`: the state sample, the scores against the oracle and the ground
truth, the outputs, and the config errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from openai_test_server import OpenAITestServer, Reply

from ellm.games.crafter.oracle import SimpleOracle
from ellm.games.crafter.prompts import state_description
from ellm.games.crafter.state import TextState
from ellm.games.housekeep.goals import yes_no_prompt
from ellm_tools.lm_quality import main, prepare, run
from ellm_tools.lm_quality.score import score_crafter
from ellm_tools.lm_quality.states import (
    CrafterSample,
    sample_crafter_states,
    sample_housekeep_questions,
)

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("no_real_keys")


def gpt(server: OpenAITestServer, *extra: str) -> list[str]:
    return ["env_spec.lm_spec.lm_class=GPTLanguageModel", "env_spec.lm_spec.lm=test-model",
            f"env_spec.lm_spec.base_url={server.base_url}", "env_spec.lm_spec.max_retries=0",
            *extra]


def test_oracle_scores_one_and_outputs_are_written(tmp_path):
    for name in ("CrafterTextEnv-v1", "CrafterTextEnv-v2"):
        out = tmp_path / name
        spec, game, suggester = prepare([f"env_spec.name={name}"], out)
        result = run(spec, game, suggester, 12, out)
        scores = result["scores"]
        assert scores["precision"] == scores["recall"] == scores["action_share"] == 1.0
        assert scores["parse_errors"] == scores["api_calls"] == 0
        assert math.isnan(scores["latency_p50_s"])  # no API: no latency
        saved = json.loads((out / "quality.json").read_text())
        assert saved["paper_setting"] is (name.endswith("v1"))
        assert saved["scores"]["latency_p50_s"] is None and saved["states"] == 12
        row = (out / "quality.md").read_text().splitlines()[2]
        assert row.startswith("| SimpleOracle | 12 | 1.00 | 1.00 | 1.00 | 0 |")


@pytest.mark.slow
def test_sample_holds_tables_stone_furnaces_and_nights(tmp_path):
    spec, _, _ = prepare([], tmp_path)
    samples, info = sample_crafter_states(spec, 60, seed=1, paper_setting=True)
    assert len(samples) == 60 and len({state_description(s.state) for s in samples}) == 60
    assert sum(s.play == "guided" for s in samples) == 30
    for word in ("table", "stone", "furnace"):
        assert any(s.sees(word) for s in samples), word
    assert any(s.night for s in samples)
    assert info["random_episodes"] >= 6 and info["guided_episodes"] >= 6
    again, _ = sample_crafter_states(spec, 10, seed=1, paper_setting=True)
    first, _ = sample_crafter_states(spec, 10, seed=1, paper_setting=True)
    assert [s.state for s in again] == [s.state for s in first]
    # A config over Crafter's own 17 actions samples the same states (its plays go by name).
    own = prepare(["env_spec.action_space_type=crafter"], tmp_path)[0]
    crafter, _ = sample_crafter_states(own, 10, seed=1, paper_setting=True)
    assert [s.state for s in crafter] == [s.state for s in first]


def hand_states() -> list[CrafterSample]:
    """Oracle (paper setting): {chop tree, drink water}, {attack cow} ("eat cow" is the same
    action), {chop grass}, {chop tree, drink water}."""
    captions = ["You see tree, and water.", "You see cow.", "You see grass.",
                "You see tree, and water. You are targeting water."]
    return [CrafterSample(TextState(c), night=False, play="random", episode=0, step=i)
            for i, c in enumerate(captions)]


def test_scripted_model_scores_by_hand(server, tmp_path):
    # Three answers of 3 goals (2 of them game actions), then one with no bullet.
    answer = Reply.bullets("chop tree", "eat cow", "fly to the moon")
    server.push(answer, answer, answer, Reply("I am not sure what to do here."))
    _, _, suggester = prepare(gpt(server, "env_spec.lm_spec.price=[1.0,2.0]"), tmp_path)
    scores = score_crafter(suggester, hand_states(), SimpleOracle(paper_setting=True))
    # Matches: chop tree (state 1), attack cow (2), none (3); the 4th answer gives no goal.
    assert scores["suggested"] == 9 and scores["oracle_goals"] == 2 + 1 + 1 + 2
    assert scores["precision"] == pytest.approx(2 / 9)
    assert scores["recall"] == pytest.approx(2 / 6)
    assert scores["action_share"] == pytest.approx(6 / 9)
    assert scores["goals_per_state"] == pytest.approx(9 / 4)
    assert scores["parse_errors"] == 1 and scores["api_calls"] == 4
    # 100 prompt + 10 answer tokens per request at $1 / $2 per 1M tokens.
    assert scores["tokens_per_query"] == 110
    assert scores["dollars_per_1k"] == pytest.approx(1000 * (100 + 20) / 1e6)
    assert scores["latency_p50_s"] > 0 and scores["latency_p95_s"] >= scores["latency_p50_s"]
    assert len(server.requests) == 4


def test_non_blocking_training_overrides_are_measured_blocking_and_said(server, tmp_path,
                                                                        caplog):
    # The README's advice: reuse the training overrides. Non-blocking, each state's answer
    # would be the fallback goals (an all-zero row); the tool says so and waits for answers.
    server.default = Reply.bullets("chop tree", "eat cow")
    with caplog.at_level("WARNING"):
        spec, game, suggester = prepare(gpt(server, "env_spec.lm_spec.blocking=false"),
                                       tmp_path)
    assert "measures with blocking=true" in caplog.text
    assert spec.lm.blocking is True and spec.cfg.env_spec.lm_spec.blocking is True
    scores = run(spec, game, suggester, 6, tmp_path)["scores"]
    assert scores["goals_per_state"] > 0 and scores["api_calls"] >= 1
    assert scores["latency_p50_s"] > 0


@pytest.mark.slow
def test_garbage_answers_and_failures_are_counted(server, tmp_path):
    server.default = Reply("As a language model I cannot play games.")
    spec, game, suggester = prepare(gpt(server), tmp_path / "garbage")
    scores = run(spec, game, suggester, 6, tmp_path / "garbage")["scores"]
    assert scores["parse_errors"] == 6 and scores["goals_per_state"] == 0
    assert math.isnan(scores["precision"]) and scores["recall"] == 0.0
    assert "| 6 | – | – | 0.00 | 6 | 0.0 |" in (tmp_path / "garbage" / "quality.md").read_text()

    server.default = Reply.error(500)
    spec, game, suggester = prepare(gpt(server), tmp_path / "down")
    scores = run(spec, game, suggester, 4, tmp_path / "down")["scores"]
    assert scores["api_errors"] == 4 and scores["parse_errors"] == 0
    # A rerun into the same directory replays the cached answers of the first run.
    server.default = Reply.bullets("chop tree")
    spec, game, suggester = prepare(gpt(server), tmp_path / "garbage")
    scores = run(spec, game, suggester, 6, tmp_path / "garbage")["scores"]
    assert scores["cache_hits"] == 6 and scores["api_calls"] == 0
    assert scores["parse_errors"] == 6 and math.isnan(scores["dollars_per_1k"])


def test_housekeep_accuracy_against_the_ground_truth(server, tmp_path):
    overrides = gpt(server, "env_spec.name=Housekeep")
    spec, _, _ = prepare(overrides, tmp_path)
    questions, _ = sample_housekeep_questions(spec, 20, seed=spec.run.seed)
    assert sum(q.truth for q in questions) == 10 and len(questions) == 20
    truth = {yes_no_prompt(q.object_name, q.receptacle_name): q.truth for q in questions}
    broken = yes_no_prompt(questions[0].object_name, questions[0].receptacle_name)

    def right(body):
        prompt = body["messages"][-1]["content"]
        if prompt == broken:
            return Reply("Yes")  # no logprobs: a parse error, the question stays unanswered
        return Reply.yes_no(-0.05, -3.0) if truth[prompt] else Reply.yes_no(-3.0, -0.05)

    server.responder = right
    spec, game, suggester = prepare(overrides, tmp_path / "right")
    scores = run(spec, game, suggester, 20, tmp_path / "right")["scores"]
    assert scores["questions"] == 20 and scores["yes_share"] == 0.5
    assert scores["accuracy"] == scores["precision"] == scores["recall"] == 1.0
    assert scores["unanswered"] == 1 and scores["parse_errors"] == 1

    server.responder = lambda body: Reply.yes_no(-0.05, -3.0)  # yes to everything
    spec, game, suggester = prepare(overrides, tmp_path / "yes")
    scores = run(spec, game, suggester, 20, tmp_path / "yes")["scores"]
    assert (scores["accuracy"], scores["precision"], scores["recall"]) == (0.5, 0.5, 1.0)
    table = (tmp_path / "yes" / "quality.md").read_text()
    assert "| 20 (10) | 0.50 | 0.50 | 1.00 | 0 | 0 |" in table

    spec, game, suggester = prepare(["env_spec.name=Housekeep"], tmp_path / "oracle")
    scores = run(spec, game, suggester, 20, tmp_path / "oracle")["scores"]
    assert scores["accuracy"] == 1.0 and scores["api_calls"] == 0


def test_bad_arguments_name_the_key(tmp_path, capsys):
    for args, key in [(["env_spec.lm_spec.lm_clas=SimpleOracle"], "env_spec.lm_spec.lm_clas"),
                      (["env_spec.lm_spec.lm_class=Gpt"], "env_spec.lm_spec.lm_class"),
                      (["+env_spec.lm_spec.colour=blue"], "colour"),
                      (["env_spec.name=Minecraft"], "env_spec.name"),
                      (["states=0"], "states")]:
        assert main([*args, f"out={tmp_path}"]) == 2
        assert key in capsys.readouterr().err
    assert not (tmp_path / "quality.json").exists()
    assert main(["--help"]) == 0
    assert "python -m ellm_tools.lm_quality [states=N] [out=DIR]" in capsys.readouterr().out


@pytest.mark.e2e
def test_command_line(tmp_path):
    def quality(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ellm_tools.lm_quality", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, check=False)

    bad = quality("env_spec.lm_spec.lm_clas=SimpleOracle")
    assert bad.returncode == 2 and "env_spec.lm_spec.lm_clas" in bad.stderr
    ok = quality("states=8", "out=q", "env_spec.lm_spec.lm_class=BaselineModel")
    assert ok.returncode == 0, ok.stderr
    assert "| Novelty | 8 |" in ok.stdout
    saved = json.loads((tmp_path / "q" / "quality.json").read_text())
    assert saved["scores"]["recall"] == 1.0 and saved["label"] == "Novelty"
