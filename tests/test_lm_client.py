"""The real `openai` client against a scripted local OpenAI-compatible server (127.0.0.1)."""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from openai_test_server import OpenAITestServer, Reply

from ellm.games.crafter.state import TextState
from ellm.games.crafter.suggesters import build_suggester
from ellm.lm import GPTLanguageModel, build_client, parse_lm_spec
from ellm.lm import config as lm_config
from lmclient import client as lm_client
from lmclient import pricing
from lmclient.answers import prompt_token_bound
from lmclient.client import LMConfigError
from lmclient.spec import OPENAI_API_URL
from text_crafter import SYNONYMS

STATE = TextState("You see grass, tree, and water. You are targeting tree.",
                  "You have in your inventory wood.", "You feel hungry.", {"wood": 1})
OTHER = TextState("You see cow and grass. You are targeting cow.", "", "", {})
REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("no_real_keys")


def spec(**kw: Any) -> dict[str, Any]:
    base = {"lm_class": "GPTLanguageModel", "lm": "test-model", "timeout": 2.0,
            "max_retries": 2, "backoff": 0.0, "max_backoff": 0.05}
    return {**base, **kw}


def make(server: OpenAITestServer, tmp_path: Path, **kw: Any) -> GPTLanguageModel:
    lm = build_suggester(spec(**kw), all_goals=[], cache_dir=tmp_path / "cache",
                         base_url=server.base_url, synonyms=SYNONYMS)
    assert isinstance(lm, GPTLanguageModel)
    return lm


def test_chat_bullets_parse_dedupe_and_novelty(server, tmp_path):
    server.push(Reply("Sure!\n- Chop tree.\n- drink water\n-   chop   tree\n- eat cow\n"))
    lm = make(server, tmp_path)
    assert lm.suggest(STATE) == ["chop tree", "drink water", "eat cow"]
    lm.mark_achieved("attack cow")  # synonym of "eat cow"
    lm.mark_achieved("chop tree")
    assert lm.suggest(STATE) == ["drink water"]
    lm.reset()
    assert lm.suggest(STATE) == ["chop tree", "drink water", "eat cow"]
    m = lm.metrics()
    assert (m["queries"], m["api_calls"], m["cache_hits"]) == (3, 1, 2)
    assert (m["prompt_tokens"], m["completion_tokens"]) == (100, 10)
    body = server.requests[0].body
    assert server.requests[0].path == "/v1/chat/completions"
    assert body["model"] == "test-model" and body["temperature"] == 0.1
    assert body["max_tokens"] == 200 and body["stop"] == ["\n\n"]
    user = body["messages"][-1]["content"]
    assert "You see grass, tree, and water." in user and "wood" in user
    assert "hungry" not in user and user.rstrip().endswith("What do you do?")


def test_an_answer_gives_at_most_64_goals_of_at_most_100_characters(server, tmp_path):
    # 20,000 goals (330 KB, under the answer's size bound) used to reach the agent whole.
    long = "- chop " + "very " * 20 + "tall tree\n"  # 111 characters: no goal, skipped
    server.push(Reply(long + "".join(f"- chop tree {i}\n" for i in range(20_000))))
    lm = make(server, tmp_path, novelty_bonus=False, constrained=False)
    assert lm.suggest(STATE) == [f"chop tree {i}" for i in range(64)]
    assert lm.metrics()["parse_errors"] == 0
    server.push(Reply(long))
    assert lm.suggest(OTHER) == [] and lm.metrics()["parse_errors"] == 1


def test_prompt_includes_status_only_when_sleepy(server, tmp_path):
    lm = make(server, tmp_path, novelty_bonus=False, max_num_goals=1)
    sleepy = TextState("You see tree.", "", "You feel hungry, sleepy.", {})
    assert lm.suggest(sleepy) == ["chop tree"]
    sent = server.requests[0].body["messages"][-1]["content"]
    assert "You feel sleepy." in sent and "hungry" not in sent  # as the original: sleepiness only


def test_requests_do_not_log_a_line_each_at_info(server, tmp_path, caplog):
    lm = make(server, tmp_path, novelty_bonus=False)
    with caplog.at_level(logging.INFO):
        lm.suggest(TextState("You see tree.", "", "", {}))
    assert len(server.requests) == 1
    assert not [r for r in caplog.records if "HTTP Request" in r.getMessage()]


def test_completions_endpoint(server, tmp_path):
    server.push(Reply.bullets("mine stone", "place stone"))
    lm = make(server, tmp_path, endpoint="completions")
    assert lm.suggest(STATE) == ["mine stone", "place stone"]
    request = server.requests[0]
    assert request.path == "/v1/completions"
    assert request.body["prompt"].endswith("What do you do?\n")


@pytest.mark.parametrize("reply", [Reply("I would chop the tree."), Reply(""), Reply(None)],
                         ids=["no-bullets", "empty", "null-content"])
def test_malformed_answer_is_cached_as_malformed(server, tmp_path, reply):
    server.push(reply)
    lm = make(server, tmp_path)
    assert lm.suggest(STATE) == []
    assert lm.suggest(STATE) == []
    m = lm.metrics()
    assert (m["api_calls"], m["cache_hits"], m["parse_errors"], m["api_errors"]) == (1, 1, 2, 0)
    assert len(server.requests) == 1


def test_http_500_is_retried_then_succeeds(server, tmp_path):
    server.push(Reply.error(500), Reply.error(503), Reply.bullets("chop tree"))
    lm = make(server, tmp_path)
    assert lm.suggest(STATE) == ["chop tree"]
    m = lm.metrics()
    assert (m["api_calls"], m["retries"], m["api_errors"]) == (3, 2, 0)


def test_persistent_failure_gives_no_goals_counts_error_and_goes_on(server, tmp_path, caplog):
    server.push(*[Reply.error(500)] * 3)
    lm = make(server, tmp_path)
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        assert lm.suggest(STATE) == []
    assert "giving up after 3 attempt(s)" in caplog.text
    assert lm.metrics()["api_errors"] == 1
    assert lm.suggest(STATE) == ["chop tree", "drink water"]  # not cached: asked again
    assert lm.metrics()["api_calls"] == 4


def test_429_honours_retry_after_capped(server, tmp_path):
    delays: list[float] = []
    server.push(Reply.rate_limited(0.04), Reply.rate_limited(100.0))
    lm = build_suggester(spec(max_backoff=0.2), all_goals=[], cache_dir=tmp_path,
                         base_url=server.base_url, sleep=delays.append)
    assert lm.suggest(STATE) == ["chop tree", "drink water"]
    assert delays == [pytest.approx(0.04), 0.2]
    assert lm.metrics()["retries"] == 2


def test_slow_answer_times_out_and_is_retried(server, tmp_path):
    server.push(Reply("- too late", delay=3.0))
    lm = make(server, tmp_path, timeout=0.3)
    assert lm.suggest(STATE) == ["chop tree", "drink water"]
    m = lm.metrics()
    assert (m["api_calls"], m["retries"], m["api_errors"]) == (2, 1, 0)
    assert m["latency_s"] >= 0.15  # mean of a >= 0.3 s timeout and a fast answer


def test_client_error_is_not_retried_and_auth_error_raises(server, tmp_path):
    server.push(Reply.error(400))
    lm = make(server, tmp_path)
    assert lm.suggest(STATE) == []
    assert (lm.metrics()["api_calls"], lm.metrics()["api_errors"]) == (1, 1)
    server.push(Reply.error(401))
    with pytest.raises(LMConfigError, match="HTTP 401"):
        lm.suggest(OTHER)


def test_budget_stops_api_calls_but_serves_cache(server, tmp_path, caplog):
    # 100 prompt tokens at $10,000 per 1M tokens = $1 per call.
    lm = make(server, tmp_path, budget=2.5, price=[10000, 0])
    states = [TextState(f"You see tree number {i}.") for i in range(6)]
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        results = [lm.suggest(s) for s in states]
    assert [bool(r) for r in results] == [True, True, True, False, False, False]
    assert lm.suggest(states[0]) == ["chop tree", "drink water"]  # cached, still served
    m = lm.metrics()
    assert (m["api_calls"], m["budget_refusals"], m["budget_exhausted"]) == (3, 3, 1)
    assert m["dollars"] == m["budget_spent"] == pytest.approx(3.0)
    assert budget_warnings(caplog) == 1
    assert len(server.requests) == 3


def budget_warnings(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records
               if r.name == "ellm.lm" and r.levelno == logging.WARNING
               and r.getMessage().startswith("LM budget of $"))


def test_budget_is_shared_by_every_client_of_the_run(server, tmp_path, caplog):
    # A run builds a training and an evaluation suggester (and Housekeep a yes/no client):
    # together they never spend more than the budget, and the warning comes once.
    train, evaluate = (make(server, tmp_path, budget=2.5, price=[10000, 0]) for _ in range(2))
    yes_no = build_client(spec(budget=2.5, price=[10000, 0]), cache_dir=tmp_path / "cache",
                          base_url=server.base_url)
    states = [TextState(f"You see tree number {i}.") for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        assert train.suggest(states[0]) and evaluate.suggest(states[1])
        assert train.suggest(states[2])  # $3 spent: over budget from now on
        assert evaluate.suggest(states[3]) == [] and train.suggest(states[3]) == []
        assert yes_no.yes_probability("Should you store a mug in the sink:") is None
        assert evaluate.suggest(states[0]) == ["chop tree", "drink water"]  # cached
    assert len(server.requests) == 3
    assert budget_warnings(caplog) == 1
    assert [c.metrics()["dollars"] for c in (train, evaluate, yes_no)] == [2.0, 1.0, 0.0]
    for client in (train, evaluate, yes_no):
        assert client.metrics()["budget_spent"] == pytest.approx(3.0)
        assert client.metrics()["budget_exhausted"] == 1.0
    other = build_suggester(spec(budget=2.5, price=[10000, 0]), all_goals=[],
                            cache_dir=tmp_path / "cache", base_url=server.base_url + "/")
    assert other.metrics()["budget_exhausted"] == 1.0  # same endpoint, however spelled


def test_a_server_on_this_machine_is_free(server, tmp_path):
    server.models = ["gpt-4o"]
    lm = make(server, tmp_path, lm="gpt-4o")  # a table model name, served locally
    assert lm.client.price == (0.0, 0.0)
    assert lm.suggest(STATE) and lm.metrics()["dollars"] == 0.0
    priced = make(server, tmp_path, lm="gpt-4o", price=[1, 2])
    assert priced.client.price == (1.0, 2.0)
    from lmclient.pricing import resolve_price

    assert resolve_price("gpt-4o", "https://my-proxy.example/v1") == (2.5, 10.0)
    assert resolve_price("gpt-4o", "http://localhost:8080/v1") == (0.0, 0.0)
    assert resolve_price("gpt-4o", "http://[::1]:8080/v1") == (0.0, 0.0)


def test_a_remote_server_without_a_price_says_the_budget_does_not_hold(tmp_path, caplog):
    # A hosted non-OpenAI endpoint (Gemini's, a colleague's vLLM) with a model the table lacks:
    # free to the budget, which the run says at start-up; a stated price makes it hold.
    remote = "http://llm.invalid/v1"  # never answers: the model list fails fast, as offline
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        client = build_client(spec(lm="gemini-2.5-flash", timeout=1.0), cache_dir=tmp_path,
                              base_url=remote)
    assert client.price == (0.0, 0.0)
    assert "no price known for model 'gemini-2.5-flash' at http://llm.invalid/v1" in caplog.text
    assert "budget does not limit them" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        priced = build_client(spec(lm="gemini-2.5-flash", timeout=1.0, price=[0.3, 2.5]),
                              cache_dir=tmp_path, base_url=remote)
    assert priced.price == (0.3, 2.5) and "no price known" not in caplog.text


@pytest.mark.parametrize("endpoint,token", [("chat", "Yes"), ("completions", " Yes")])
def test_yes_probability(server, tmp_path, endpoint, token):
    client = build_client(spec(endpoint=endpoint, temperature=0), cache_dir=tmp_path,
                          base_url=server.base_url)
    server.push(Reply.yes_no(math.log(0.6), math.log(0.2), token),
                Reply.yes_no(None, -0.1, token), Reply.yes_no(None, None, token),
                Reply("Yes"))
    assert client.yes_probability("Should you store a mug in the sink:") == pytest.approx(0.75)
    assert client.yes_probability("q2") == pytest.approx(math.exp(-100 + 0.1), rel=1e-6)
    assert client.yes_probability("q3") == pytest.approx(0.5)
    assert client.yes_probability("no logprobs") is None  # malformed
    assert client.yes_probability("no logprobs") is None  # cached as malformed
    assert client.yes_probability("Should you store a mug in the sink:") == pytest.approx(0.75)
    m = client.metrics()
    assert (m["api_calls"], m["cache_hits"], m["parse_errors"]) == (4, 2, 2)
    body = server.requests[0].body
    assert body["max_tokens"] == 1 and body["temperature"] == 0
    assert body["logprobs"] == (True if endpoint == "chat" else 5)
    if endpoint == "chat":
        assert body["top_logprobs"] == 5


@pytest.mark.parametrize("threshold,expected", [(0.5, [True, False, False, None]),
                                                (0.8, [False, False, False, None]),
                                                (0.0, [True, True, True, None])])
def test_is_yes_compares_with_prob_threshold(server, tmp_path, threshold, expected):
    # P(yes) = 0.75, 0.5 (exactly: "yes" needs P(yes) > threshold), ~e^-100, no logprobs.
    server.push(Reply.yes_no(math.log(0.6), math.log(0.2)), Reply.yes_no(-1.0, -1.0),
                Reply.yes_no(None, -0.1), Reply("Yes"))
    lm = make(server, tmp_path, prob_threshold=threshold, temperature=0)
    assert [lm.is_yes(q) for q in ("q1", "q2", "q3", "q4")] == expected


def test_dummy_lm_needs_no_network_and_writes_no_cache(tmp_path):
    lm = build_suggester(spec(dummy_lm=True, base_url=None), all_goals=[],
                         cache_dir=tmp_path / "cache")
    assert lm.suggest(STATE) == ["chop tree", "drink water", "attack cow",
                                 "place crafting table"]
    assert lm.metrics()["api_calls"] == 0
    assert not (tmp_path / "cache").exists()


def test_retired_model_refused_without_cache_or_base_url(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ValueError, match="text-davinci-002 is retired"):
        build_suggester(spec(lm="text-davinci-002"), all_goals=[], cache_dir=tmp_path)


def test_retired_model_with_base_url_runs(server, tmp_path, caplog):
    server.models = ["text-davinci-002"]  # a server of one's own may serve that name
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        lm = make(server, tmp_path, lm="text-davinci-002")
        assert lm.suggest(STATE) == ["chop tree", "drink water"]
    assert caplog.records == []
    server.models = ["model-a", "model-b"]
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        lm = make(server, tmp_path, lm="text-davinci-002")
        assert lm.suggest(OTHER) == ["chop tree", "drink water"]
    assert "does not list the model 'text-davinci-002'" in caplog.text
    assert "retired OpenAI model name; sending it to" in caplog.text
    assert server.requests[-1].body["model"] == "text-davinci-002"


def test_a_server_of_one_model_is_asked_for_that_model(server, tmp_path, caplog):
    # The README's two overrides (lm_class, base_url) against `python -m ellm_tools.serve`: the
    # default model name is not what the server serves; its answers must not be cached or
    # logged as gpt-4o-mini's.
    server.models = ["gemma-3-270m"]
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        lm = build_suggester({"lm_class": "GPTLanguageModel"}, all_goals=[],
                             cache_dir=tmp_path, base_url=server.base_url)
        assert lm.suggest(STATE) == ["chop tree", "drink water"]
    assert ("serves one model, 'gemma-3-270m', not env_spec.lm_spec.lm='gpt-4o-mini'"
            in caplog.text)
    assert lm.client.spec.lm == "gemma-3-270m" and "gemma-3-270m" in repr(lm.client)
    assert server.requests[-1].body["model"] == "gemma-3-270m"
    cache, scope = lm.client.cache, lm.client.scope
    assert cache.has_model("gemma-3-270m", scope) and not cache.has_model("gpt-4o-mini", scope)
    assert lm.client.price == (0.0, 0.0)
    # A run builds a training and an evaluation suggester: the console says it once.
    build_suggester({"lm_class": "GPTLanguageModel"}, all_goals=[], cache_dir=tmp_path,
                    base_url=server.base_url)
    assert caplog.text.count("serves one model") == 1


def test_a_model_list_is_read_for_its_valid_names_only(server, tmp_path):
    server.models = [42, "\ud800", "", "served-model"]  # a lying server's list
    client = build_client(spec(lm="other"), cache_dir=tmp_path, base_url=server.base_url)
    assert client.spec.lm == "served-model"  # the only name a request can carry
    assert client.complete(ASK) == "- chop tree\n- drink water"
    assert server.requests[-1].body["model"] == "served-model"


def test_a_server_that_lists_no_models_gets_the_configured_name(server, tmp_path, caplog):
    server.models = None  # GET /v1/models answers 404
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        lm = make(server, tmp_path, lm="my-model")
        assert lm.suggest(STATE) == ["chop tree", "drink water"]
    assert "could not list the models served at" in caplog.text
    assert server.requests[-1].body["model"] == "my-model"


def test_unknown_model_on_openai_needs_a_price(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ValueError, match="price"):
        build_suggester(spec(lm="my-new-model"), all_goals=[], cache_dir=tmp_path)
    lm = build_suggester(spec(lm="my-new-model", price=[1, 2]), all_goals=[], cache_dir=tmp_path)
    assert lm.client.price == (1.0, 2.0)


def test_no_key_for_openai_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        build_suggester(spec(), all_goals=[], cache_dir=tmp_path)


CHILD = textwrap.dedent("""
    import json, sys
    from ellm.games.crafter.state import TextState
    from ellm.games.crafter.suggesters import build_suggester
    lm = build_suggester({"lm_class": "GPTLanguageModel", "lm": "test-model"}, all_goals=[],
                         cache_dir=sys.argv[1], base_url=sys.argv[2])
    goals = lm.suggest(TextState("You see tree and water."))
    print(json.dumps({"goals": goals, **lm.metrics()}))
""")


def test_cache_shared_across_processes(server, tmp_path):
    def run(seed: str) -> dict[str, Any]:  # different hash seeds: keys must not depend on them
        out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), server.base_url],
                             capture_output=True, text=True, check=False, timeout=120, cwd=REPO,
                             env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": seed})
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    server.push(Reply.bullets("chop tree", "drink water"))
    first, second = run("1"), run("987654")
    assert first["goals"] == second["goals"] == ["chop tree", "drink water"]
    assert (first["api_calls"], first["cache_hits"]) == (1, 0)
    assert (second["api_calls"], second["cache_hits"]) == (0, 1)
    assert len(server.requests) == 1


def test_key_never_written_logged_or_shown(server, tmp_path, monkeypatch):
    secret = "sk-test-SECRET"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    handler = logging.FileHandler(run_dir / "train.log")
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        raw = spec(openai_key=secret)
        lm = make(server, tmp_path, openai_key=secret)
        server.push(Reply.error(500), Reply.bullets("chop tree"), Reply.error(400))
        lm.suggest(STATE)
        lm.suggest(OTHER)
        from ellm.lm import parse_lm_spec, redact_lm_spec
        (run_dir / "lm_spec.json").write_text(json.dumps(parse_lm_spec(raw).to_dict()))
        (run_dir / "config.json").write_text(json.dumps(redact_lm_spec(raw)))
        (run_dir / "metrics.json").write_text(json.dumps(lm.metrics()))
        shown = [repr(lm), str(lm), repr(lm.client), repr(parse_lm_spec(raw)), repr(lm.client.spec)]
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(old_level)
    assert all(secret not in s for s in shown)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.startswith("lm_cache.sqlite3") for p in files)
    assert (run_dir / "train.log").stat().st_size > 0
    for path in files:
        assert secret.encode() not in path.read_bytes(), f"key leaked into {path}"


def test_openai_key_is_sent_only_to_openai(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-only")
    make(server, tmp_path).suggest(STATE)
    assert server.requests[-1].authorization == "Bearer no-key-needed"
    monkeypatch.setenv("ELLM_LM_API_KEY", "local-server-key")
    make(server, tmp_path).suggest(OTHER)
    assert server.requests[-1].authorization == "Bearer local-server-key"


def test_dollars_come_from_reported_usage_and_the_price_table(server, tmp_path, monkeypatch):
    # As if the server were a paid proxy (not on this machine): the table prices gpt-4o-mini.
    monkeypatch.setattr(lm_client, "resolve_price", lambda model, base_url, explicit: (
        pricing.resolve_price(model, "https://proxy.example/v1", explicit)))
    server.models = ["gpt-4o-mini"]
    server.push(Reply.bullets("chop tree", prompt_tokens=1000, completion_tokens=200),
                Reply.bullets("drink water", prompt_tokens=3000, completion_tokens=0))
    lm = make(server, tmp_path, lm="gpt-4o-mini")
    lm.suggest(STATE)
    lm.suggest(OTHER)
    m = lm.metrics()
    assert (m["prompt_tokens"], m["completion_tokens"]) == (4000, 200)
    assert m["dollars"] == pytest.approx((4000 * 0.15 + 200 * 0.60) / 1e6)
    assert pricing.table_price("gpt-4o-mini-2024-07-18") == (0.15, 0.60)
    assert pricing.table_price("gpt-4o-2024-08-06") == (2.50, 10.00)
    assert pricing.table_price("my-model") is None


def test_price_table_matches_the_documentation():
    doc = (REPO / "docs" / "lm.md").read_text()
    section = doc[doc.index("## Budget and prices"):doc.index("## Errors, retries")]
    rows = [line.split("|")[1:4] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| model", "| ---"))]
    table = {name.strip(): (float(i), float(o)) for name, i, o in rows}
    assert table == pricing.PRICES_PER_MTOK
    assert "checked August 2025" in section and pricing.PRICES_CHECKED == "2025-08"


def test_key_sources(tmp_path, monkeypatch):
    def key_of(**kw: Any) -> str:
        client = build_client(spec(lm="gpt-4o-mini", **kw), cache_dir=tmp_path)
        assert client._openai is not None
        return client._openai.api_key

    monkeypatch.setenv(lm_config.LEGACY_KEY_ENV, "sk-legacy-cli")
    assert key_of() == "sk-legacy-cli"  # openai_key=... given on train.py's command line
    assert key_of(openai_key="sk-legacy-config") == "sk-legacy-config"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert key_of(openai_key="sk-legacy-config") == "sk-env"


# ---- answers the client does not trust -------------------------------------------------------
# Longer than the 100 prompt tokens the test server reports: the bound is what is charged.
ASK = [{"role": "user", "content": "You see grass, tree, and water. You are targeting tree. "
                                   "You have in your inventory wood. What do you do?"}]
QUESTION = ("Should you store a mug in the kitchen sink, where the dishes of the day wait to "
            "be washed? Answer yes or no:")
NAN = float("nan")
# Each a 200 answer from a lying server, with what it asks (text or a yes/no probability).
LIES = {
    "content-a-number": ("text", Reply(42)),
    "content-a-list": ("text", Reply(["- chop tree"])),
    "content-lone-surrogate": ("text", Reply("- chop \ud800")),
    "prompt-tokens-nan": ("text", Reply.bullets("chop tree", prompt_tokens=NAN)),
    "completion-tokens-a-string": ("text", Reply.bullets("chop tree", completion_tokens="7")),
    "completion-tokens-1e20": ("text", Reply.bullets("chop tree", completion_tokens=1e20)),
    "completion-tokens-10**20": ("text", Reply.bullets("chop tree", completion_tokens=10**20)),
    "completion-tokens-over-max_tokens": ("text", Reply.bullets("x", completion_tokens=201)),
    "prompt-tokens-negative": ("text", Reply.bullets("chop tree", prompt_tokens=-10**12)),
    "usage-a-string": ("text", Reply.bullets("chop tree", usage="free")),
    "not-json": ("text", Reply.garbage()),
    "choices-a-string": ("text", Reply.garbage(b'{"choices": "abc"}')),
    "no-choices": ("text", Reply.garbage(b'{"choices": []}')),
    "logprob-a-string": ("yes", Reply("Yes", top_logprobs={"Yes": "high", "No": -1.0})),
    "logprob-null": ("yes", Reply("Yes", top_logprobs={"Yes": None, "No": -1.0})),
    "logprob-nan": ("yes", Reply("Yes", top_logprobs={"Yes": NAN, "No": -1.0})),
    "logprob-positive": ("yes", Reply("Yes", top_logprobs={"Yes": 3.0, "No": -1.0})),
    "token-a-number": ("yes", Reply.garbage(json.dumps({"choices": [{
        "message": {"content": "Yes"},
        "logprobs": {"content": [{"token": "Yes", "logprob": -0.1,
                                  "top_logprobs": [{"token": 1, "logprob": -0.1}]}]},
    }]}).encode())),
}
PRICE = 1000.0  # $ per 1M tokens, in and out: $0.001 a token


# The raw bodies are chat-shaped: the completions endpoint gets the others.
ENDPOINT_CASES = [(case, "chat") for case in LIES] + [
    (case, "completions") for case, (_, lie) in LIES.items() if lie.raw is None]


@pytest.mark.parametrize("case, endpoint", ENDPOINT_CASES)
def test_a_lying_answer_is_counted_charged_never_cached_and_never_crashes(server, tmp_path,
                                                                         case, endpoint):
    kind, lie = LIES[case]
    client = build_client(spec(endpoint=endpoint, price=[PRICE, PRICE], max_retries=0),
                          cache_dir=tmp_path, base_url=server.base_url)
    prompt = ASK if endpoint == "chat" else ASK[0]["content"]
    request = [{"role": "user", "content": QUESTION}] if endpoint == "chat" else QUESTION

    def ask() -> Any:
        return client.complete(prompt) if kind == "text" else client.yes_probability(QUESTION)

    server.push(lie)
    assert ask() is None  # no answer, no exception
    m = client.metrics()
    assert (m["api_errors"], m["parse_errors"], m["api_calls"]) == (1, 0, 1)
    assert len(client.cache) == 0
    # Charged the most the request could have cost: the prompt's bytes and max_tokens.
    bound = prompt_token_bound(prompt if kind == "text" else request)
    max_tokens = 200 if kind == "text" else 1
    assert (m["prompt_tokens"], m["completion_tokens"]) == (bound, max_tokens)
    charged = client.ledger.dollars
    assert charged == m["dollars"] == pytest.approx((bound + max_tokens) * PRICE / 1e6)
    # The honest answer after it: asked again (nothing was cached), used and cached.
    server.push(Reply.bullets("chop tree") if kind == "text" else Reply.yes_no(-0.1, -2.3))
    assert ask() == ("- chop tree\n" if kind == "text" else pytest.approx(0.9, abs=0.01))
    assert ask() == ("- chop tree\n" if kind == "text" else pytest.approx(0.9, abs=0.01))
    assert len(client.cache) == 1 and len(server.requests) == 2
    m = client.metrics()
    assert (m["api_errors"], m["parse_errors"], m["cache_hits"]) == (1, 0, 1)
    assert client.ledger.dollars > charged


def test_a_liar_cannot_credit_the_budget(server, tmp_path, caplog):
    # Before: a negative prompt_tokens took $1000 off the ledger, and the run spent on.
    client = build_client(spec(price=[PRICE, PRICE], budget=0.5, max_retries=0),
                          cache_dir=tmp_path, base_url=server.base_url)
    spent = [client.ledger.dollars]
    server.default = Reply.bullets("chop tree", prompt_tokens=-10**9)
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        for i in range(5):
            assert client.complete(f"You see tree number {i}.") is None
            spent.append(client.ledger.dollars)
    assert spent == sorted(spent) and len(set(spent)) == len(spent) - 2
    assert client.budget_exhausted and client.metrics()["budget_refusals"] == 2
    assert len(server.requests) == 3  # ~$0.22 charged each: the third passes the budget
    assert "usage.prompt_tokens is -1000000000, not a token count" in caplog.text
    for bad in (-0.01, NAN, math.inf):
        with pytest.raises(ValueError, match="finite, non-negative"):
            client.ledger.charge(bad)


def test_an_answer_without_usage_is_charged_its_bounds_and_cached(server, tmp_path):
    client = build_client(spec(price=[PRICE, PRICE]), cache_dir=tmp_path,
                          base_url=server.base_url)
    server.push(Reply.bullets("chop tree", usage=None))  # some servers report no usage
    assert client.complete(ASK) == "- chop tree\n"
    m = client.metrics()
    assert (m["prompt_tokens"], m["completion_tokens"]) == (prompt_token_bound(ASK), 200)
    assert m["api_errors"] == 0 and len(client.cache) == 1


def test_a_caption_with_a_lone_surrogate_is_asked_and_cached(server, tmp_path):
    lm = make(server, tmp_path)
    state = TextState("You see tree and \ud800.")
    assert lm.suggest(state) == ["chop tree", "drink water"]
    assert lm.suggest(state) == ["chop tree", "drink water"]
    assert "You see tree and \ufffd." in server.requests[0].body["messages"][-1]["content"]
    assert len(server.requests) == 1 and lm.metrics()["cache_hits"] == 1


def test_a_server_that_hangs_up_is_named_in_the_error(server, tmp_path, caplog):
    # A server process that crashed mid-request closes the connection without an answer.
    server.push(*[Reply.hung_up()] * 3)
    client = build_client(spec(max_retries=2), cache_dir=tmp_path, base_url=server.base_url)
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        assert client.complete(ASK) is None
    assert (f"giving up after 3 attempt(s): the server at {server.base_url}/chat/completions "
            "closed the connection without answering") in caplog.text
    m = client.metrics()
    assert (m["api_errors"], m["api_calls"], len(client.cache)) == (1, 3, 0)
    assert client.complete(ASK) == "- chop tree\n- drink water"


def test_a_trickling_server_cannot_hold_a_request_past_its_deadline(server, tmp_path, caplog):
    # Every byte comes well within the per-read timeout; the whole answer would take ~20 s.
    server.push(Reply("- chop tree", trickle=0.05))
    client = build_client(spec(max_retries=0, timeout=1.0), cache_dir=tmp_path,
                          base_url=server.base_url)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        assert client.complete(ASK) is None
    assert time.monotonic() - start < 2.0
    assert "no whole answer from" in caplog.text and "within 1 s" in caplog.text
    m = client.metrics()
    assert (m["api_errors"], m["api_calls"], len(client.cache)) == (1, 1, 0)
    assert client.complete(ASK) == "- chop tree\n- drink water"  # the next request is served


@pytest.mark.parametrize("reply", [Reply("x" * 3_000_000), Reply(endless=True)],
                         ids=["huge", "endless"])
def test_an_oversized_answer_is_refused_as_it_streams(server, tmp_path, caplog, reply):
    server.push(reply)
    client = build_client(spec(max_retries=2, timeout=30.0, max_tokens=50),
                          cache_dir=tmp_path, base_url=server.base_url)
    limit = lm_client.body_limit(50)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        assert client.complete(ASK) is None
    assert time.monotonic() - start < 10.0  # not the endless body's end
    assert f"is over {limit:,} bytes" in caplog.text and "not retried" in caplog.text
    m = client.metrics()
    assert (m["api_errors"], m["api_calls"], len(client.cache)) == (1, 1, 0)
    # What was read and kept stays near the bound (plus what sockets buffer), not the body.
    if reply.endless:
        time.sleep(0.5)
        assert server.sent < limit + 8 * 1024 * 1024
    assert lm_client.body_limit(10 ** 9) == lm_client.BODY_BYTES_CAP


def test_a_server_that_is_not_listening_is_named_in_the_error(tmp_path, caplog):
    client = build_client(spec(max_retries=0), cache_dir=tmp_path,
                          base_url="http://127.0.0.1:9/v1")
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        assert client.complete(ASK) is None
    assert "APIConnectionError at http://127.0.0.1:9/v1/chat/completions: " in caplog.text


# ---- whose answers the cache serves -------------------------------------------------------------
def test_cache_misses_count_every_lookup_the_cache_did_not_answer(server, tmp_path):
    client = build_client(spec(), cache_dir=tmp_path, base_url=server.base_url)
    assert client.complete(ASK) == client.complete(ASK) == "- chop tree\n- drink water"
    m = client.metrics()
    assert (m["cache_misses"], m["api_calls"], m["cache_hits"]) == (1, 1, 1)


def test_a_local_servers_answers_never_pass_for_the_hosted_models(server, tmp_path, monkeypatch):
    # The old bug: a server whose model list failed was asked for gpt-4o-mini, and its answers
    # were then served to a client of OpenAI's gpt-4o-mini from the shared cache.
    server.models = None
    local = build_client(spec(lm="gpt-4o-mini"), cache_dir=tmp_path, base_url=server.base_url)
    assert local.complete(ASK) == "- chop tree\n- drink water"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    hosted = build_client(spec(lm="gpt-4o-mini", cache_only=True), cache_dir=tmp_path)
    assert hosted.complete(ASK) is None
    assert hosted.metrics()["cache_misses"] == 1
    assert local.cache.has_model("gpt-4o-mini", server.base_url)
    assert not hosted.cache.has_model("gpt-4o-mini", OPENAI_API_URL)


def test_two_servers_of_one_model_share_answers_only_when_asked_to(server, tmp_path):
    with OpenAITestServer() as other:
        other.default = Reply.bullets("drink water")
        first, second = (build_client(spec(), cache_dir=tmp_path, base_url=s.base_url)
                         for s in (server, other))
        assert first.complete(ASK) == "- chop tree\n- drink water"
        assert second.complete(ASK) == "- drink water\n"  # its own answer
        shared = [build_client(spec(cache_scope="model"), cache_dir=tmp_path,
                               base_url=s.base_url) for s in (server, other)]
        assert shared[0].complete(ASK) == "- chop tree\n- drink water"
        assert shared[1].complete(ASK) == "- chop tree\n- drink water"  # a replica's answer
        assert shared[1].metrics()["cache_hits"] == 1
        assert (len(server.requests), len(other.requests)) == (2, 1)


def test_cache_scope_is_checked():
    assert parse_lm_spec({}).cache_scope == "endpoint"
    assert parse_lm_spec({"cache_scope": "model"}).cache_scope == "model"
    with pytest.raises(ValueError, match=r"env_spec.lm_spec.cache_scope='global' is invalid: "
                                         r"expected one of endpoint, model"):
        parse_lm_spec({"cache_scope": "global"})


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("temperature", float("nan"), "a number >= 0"),
    ("budget", float("inf"), "a number >= 0 (dollars)"),
    ("max_tokens", 2.5, "an integer >= 1"),
    ("max_retries", float("inf"), "an integer >= 0"),
    ("max_num_goals", 0, "all or an integer in [1, 64]"),
    ("dummy_lm", "yes", "true or false"),
    ("lm", "\udcff", "a model name (non-empty UTF-8 text)"),
    ("price", [1.0], "[input, output] dollars per 1M tokens"),
])
def test_a_bad_lm_spec_value_names_its_key_and_what_was_expected(key, value, expected):
    with pytest.raises(ValueError) as err:
        parse_lm_spec({key: value})
    assert str(err.value).startswith(f"env_spec.lm_spec.{key}={value!r} is invalid: expected "
                                     f"{expected}")


def test_a_cache_broken_mid_run_is_warned_about_and_the_run_goes_on(server, tmp_path, caplog):
    lm = make(server, tmp_path)
    assert lm.suggest(STATE) == ["chop tree", "drink water"]
    with sqlite3.connect(tmp_path / "cache" / "lm_cache.sqlite3") as conn:
        conn.execute("DROP TABLE answers")
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        assert lm.suggest(OTHER) == ["chop tree", "drink water"]
    assert "no such table: answers: answering as if it were not cached" in caplog.text
    assert "no such table: answers: answers are used but not cached" in caplog.text
    assert lm.metrics()["api_errors"] == 0
