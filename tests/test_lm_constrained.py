"""Constrained answers (``env_spec.lm_spec.constrained``): what each request carries, as the
scripted OpenAI-compatible server receives it, and what becomes of refusals and violations."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai_test_server import OpenAITestServer, Reply

from ellm.errors import ConfigError
from ellm.games.crafter.state import TextState
from ellm.games.crafter.suggesters import build_suggester
from ellm.lm import build_client, parse_lm_spec
from ellm.run.config import check_lm_spec
from llm_in_the_loop.llf.policies import LLMPolicy
from llm_in_the_loop.policy_search.parameters import ParameterBuffer, ParameterSpace
from llm_in_the_loop.policy_search.proposers import LLMProposer
from lmclient.cache import make_key, sampling_params
from lmclient.constraints import YES_NO, Choice, GoalList, OptoPrimeAnswer, Setting
from lmclient.dialects import auto_dialect, request_fields

pytestmark = pytest.mark.usefixtures("no_real_keys")

STATE = TextState("You see grass, tree, and water. You are targeting tree.",
                  "You have in your inventory wood.", "", {"wood": 1})
VOCABULARY = ("chop tree", "drink water", "attack cow", "place stone")
GOALS = GoalList("goals", vocabulary=VOCABULARY, max_items=3)
ACTIONS = ("do nothing", "move left", "chop tree")


def spec(**kw: Any) -> dict[str, Any]:
    return {"lm_class": "GPTLanguageModel", "lm": "test-model", "timeout": 2.0,
            "max_retries": 1, "backoff": 0.0, "max_backoff": 0.01, **kw}


def suggester(server: OpenAITestServer, tmp_path: Path, **kw: Any) -> Any:
    return build_suggester(spec(**kw), all_goals=[], cache_dir=tmp_path / "cache",
                           base_url=server.base_url, goal_vocabulary=VOCABULARY)


# ---- the constraints themselves ------------------------------------------------------------
def test_each_constraint_reads_its_text_form_and_its_json_form_and_nothing_else():
    assert GOALS.read("- chop tree\n- drink water\n") == "- chop tree\n- drink water\n"
    assert GOALS.read('{"goals": ["attack cow"]}') == "- attack cow\n"
    for bad in ("- eat grass\n", "Sure!\n- chop tree\n", "", '{"goals": []}',
                '{"goals": ["chop tree", "chop tree", "chop tree", "chop tree"]}',
                '{"goals": ["chop tree"], "why": "x"}'):
        assert GOALS.read(bad) is None, bad
    action = Choice("action", options=ACTIONS, field="action")
    assert action.read(" chop tree") == "chop tree"
    assert action.read('{"action": "move left"}') == "move left"
    assert action.read("chop trees") is None and action.read('{"action": "fly"}') is None
    assert YES_NO.read("No") == "No" and YES_NO.read('{"answer": "Yes"}') == "Yes"
    assert YES_NO.read("yes") is None
    setting = Setting("setting", names=("w0", "w1"), low=-6, high=6, decimals=2)
    assert setting.read(" w0=1.5, w1=-2") == "w0=1.5, w1=-2"
    assert setting.read('{"w0": 1, "w1": -0.25}') == "w0=1, w1=-0.25"
    assert setting.read("w0=1.5") is None and setting.read('{"w0": 1, "w1": "2"}') is None
    opto = OptoPrimeAnswer("optoprime", variables=("__code",), prefix="def f(obs):")
    good = {"reasoning": "r", "answer": "", "suggestion": {"__code": "def f(obs):\n    return 1"}}
    assert json.loads(opto.read(json.dumps(good))) == good
    assert opto.read(json.dumps({**good, "suggestion": {}})) is None
    assert opto.read(json.dumps({**good, "suggestion": {"__code": "f = 1"}})) is None
    assert opto.read("TERMINATE") is None


def test_grammars_spell_what_the_text_forms_read():
    assert GOALS.grammar() == ('root ::= item{1,3} "\\n"?\nitem ::= "- " goal "\\n"\n'
                               'goal ::= "chop tree" | "drink water" | "attack cow" | '
                               '"place stone"\n')
    assert YES_NO.grammar() == 'root ::= " "? ("Yes" | "No")\n'
    setting = Setting("setting", names=("w0", "w1"), low=0, high=10, decimals=1)
    assert setting.grammar() == ('root ::= " "? "w0=" num ", " "w1=" num\n'
                                 'num ::= "-"? [0-9]{1,2} ("." [0-9]{1,1})?\n')
    opto = OptoPrimeAnswer("o", variables=("__code",), prefix="def act(obs):")
    assert '"\\"__code\\":" ws "\\"" "def act(obs):" char* "\\""' in opto.grammar()
    assert opto.schema()["properties"]["suggestion"]["properties"]["__code"] == {
        "type": "string", "pattern": "^def act\\(obs\\):"}


def test_the_dialect_rule():
    owners = {"vllm": "vllm", "me": "llama.cpp", "llamacpp": "llama.cpp"}
    for owner, dialect in owners.items():
        assert auto_dialect("http://h:8000/v1", "completions", "m", [owner]) == dialect
    assert auto_dialect("http://h:8000/v1", "chat", "m", ["test"]) is None
    assert auto_dialect("http://h:8000/v1", "chat", "m", ["vllm", "me"]) is None  # unclear
    assert auto_dialect(None, "chat", "gpt-4o-mini", []) == "openai"
    for model in ("gpt-4.1-nano", "gpt-4o", "o3-mini", "gpt-5"):
        assert auto_dialect("https://api.openai.com/v1", "chat", model, []) == "openai"
    for model in ("gpt-3.5-turbo", "gpt-4", "gpt-4o-2024-05-13", "o1-mini", "davinci-002"):
        assert auto_dialect(None, "chat", model, []) is None
    assert auto_dialect(None, "completions", "gpt-4o-mini", []) is None
    key = GOALS.key()
    assert request_fields(key, "vllm", (0, 9, 2)) == {"extra_body": {"guided_json": key["schema"]}}
    assert request_fields(key, "vllm", None) == {
        "extra_body": {"structured_outputs": {"json": key["schema"]}}}


@pytest.mark.parametrize(("value", "parsed"), [
    (None, "auto"), ("auto", "auto"), (True, "true"), ("false", "false"), ("TRUE", "true")])
def test_the_key_is_auto_true_or_false(value, parsed):
    raw = {} if value is None else {"constrained": value}
    assert parse_lm_spec(raw).constrained == parsed


@pytest.mark.parametrize("bad", ["yes", 1, "strict", None])
def test_a_bad_value_is_an_error_naming_the_key(bad):
    with pytest.raises(ConfigError, match=r"env_spec\.lm_spec\.constrained=.* is invalid: "
                                          r"expected one of auto, true, false"):
        check_lm_spec({"constrained": bad})


# ---- what each request carries -------------------------------------------------------------
def test_goal_requests_carry_the_games_vocabulary_as_a_grammar_on_llama_cpp(server, tmp_path):
    server.owned_by = "me"  # llama-cpp-python's server (python -m ellm_tools.serve)
    server.push(Reply.bullets("chop tree", "drink water"))
    lm = suggester(server, tmp_path, max_num_goals=3)
    assert lm.suggest(STATE) == ["chop tree", "drink water"]
    body = server.requests[0].body
    assert body["grammar"] == GOALS.grammar() and "response_format" not in body
    assert lm.metrics()["constrained_requests"] == 1


def test_vllm_gets_the_json_schema_and_its_json_answer_is_read(server, tmp_path):
    server.owned_by, server.version = "vllm", "0.11.0"
    server.push(Reply(json.dumps({"goals": ["attack cow", "chop tree"]})))
    lm = suggester(server, tmp_path, max_num_goals=3, endpoint="completions")
    assert lm.suggest(STATE) == ["attack cow", "chop tree"]
    sent = server.requests[0].body["structured_outputs"]["json"]
    assert sent == GOALS.schema() and sent["properties"]["goals"]["items"]["enum"] == list(
        VOCABULARY)
    server.version = "0.9.2"  # before structured_outputs: guided_json
    server.push(Reply(json.dumps({"goals": ["place stone"]})))
    assert suggester(server, tmp_path / "old", max_num_goals=3).suggest(STATE) == ["place stone"]
    assert server.requests[1].body["guided_json"] == GOALS.schema()


def test_true_on_an_unknown_server_sends_openais_response_format(server, tmp_path):
    server.push(Reply(json.dumps({"goals": ["chop tree"]})))
    lm = suggester(server, tmp_path, constrained=True, max_num_goals=3)
    assert lm.suggest(STATE) == ["chop tree"]
    assert server.requests[0].body["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "goals", "schema": GOALS.schema(),
                                               "strict": True}}


def test_a_constrained_request_asks_for_at_most_64_goals(server, tmp_path):
    server.push(Reply(json.dumps({"goals": ["chop tree"]})))
    lm = suggester(server, tmp_path, constrained=True, max_num_goals=64)
    assert lm.suggest(STATE) == ["chop tree"]
    schema = server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["goals"]["maxItems"] == 64
    with pytest.raises(ValueError, match=r"max_num_goals=1000 is invalid.*\[1, 64\]"):
        suggester(server, tmp_path, constrained=True, max_num_goals=1000)


@pytest.mark.parametrize(("owned_by", "constrained"), [("test", "auto"), ("me", "false")])
def test_off_requests_carry_no_constraint(server, tmp_path, owned_by, constrained):
    server.owned_by = owned_by
    lm = suggester(server, tmp_path, constrained=constrained)
    assert lm.suggest(STATE) == ["chop tree", "drink water"]
    body = server.requests[0].body
    assert not {"grammar", "response_format", "structured_outputs", "guided_json"} & set(body)
    assert lm.metrics()["constrained_requests"] == 0


def test_the_policy_asks_for_one_valid_action(server, tmp_path):
    server.owned_by = "me"
    server.push(Reply(" chop tree"))
    agent = LLMPolicy(build_client(spec(endpoint="completions"), cache_dir=tmp_path / "c",
                                   base_url=server.base_url))
    agent.reset({"instruction": "Chop a tree.", "observation": "o0", "feedback": None}, ACTIONS)
    assert agent.act({"observation": "o1", "feedback": None}) == "chop tree"
    assert server.requests[0].body["grammar"] == (
        'root ::= " "? ("do nothing" | "move left" | "chop tree")\n')


def test_policy_search_asks_for_a_number_per_parameter(server, tmp_path):
    server.owned_by = "vllm"
    server.push(Reply(json.dumps({"w0": 1.25, "w1": -7.5})))
    space = ParameterSpace(("w0", "w1"), -6.0, 6.0)
    client = build_client(spec(), cache_dir=tmp_path / "c", base_url=server.base_url)
    proposer = LLMProposer(client, space, np.random.default_rng(0), task="Drive.", step=1.0,
                           prompt_entries=10, iterations=5)
    proposal = proposer.propose(ParameterBuffer(space), 1)
    assert (proposal.params, proposal.status) == ((1.25, -6.0), "clipped")
    schema = server.requests[0].body["structured_outputs"]["json"]
    assert schema["required"] == ["w0", "w1"]
    assert schema["properties"]["w0"] == {"type": "number", "minimum": -6.0, "maximum": 6.0}


def test_yes_no_asks_for_yes_or_no_and_keeps_the_logprob_path(server, tmp_path):
    server.owned_by = "me"
    server.push(Reply.yes_no(-0.1, -2.5), Reply("No"))
    client = build_client(spec(endpoint="completions"), cache_dir=tmp_path / "c",
                          base_url=server.base_url)
    assert client.yes_probability("Should you store a cup in/on the sink:") == pytest.approx(
        1 / (1 + np.exp(-2.4)))
    assert client.yes_probability("Should you store a cup in/on the bed:") == 0.0  # no logprobs
    body = server.requests[0].body
    assert body["grammar"] == YES_NO.grammar() and body["logprobs"] == 5
    assert body["max_tokens"] == 8


def test_a_json_yes_no_answer_is_read_at_its_word(server, tmp_path):
    server.owned_by = "vllm"
    top = [{"token": t, "logprob": -0.01, "top_logprobs": [{"token": t, "logprob": -0.01}]}
           for t in ('{"', "answer", '":"')]
    word = {"token": "No", "logprob": -0.2, "top_logprobs": [
        {"token": "No", "logprob": -0.2}, {"token": "Yes", "logprob": -1.8}]}
    body = {"choices": [{"index": 0, "message": {"role": "assistant",
                                                 "content": '{"answer":"No"}'},
                         "logprobs": {"content": [*top, word]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 6}}
    server.push(Reply(None, raw=json.dumps(body).encode()))
    client = build_client(spec(), cache_dir=tmp_path / "c", base_url=server.base_url)
    assert client.yes_probability("q") == pytest.approx(1 / (1 + np.exp(1.6)))


# ---- refusals, violations and the cache ----------------------------------------------------
def test_a_refused_constraint_is_said_once_counted_and_the_run_goes_on_free(
        server, tmp_path, caplog):
    server.owned_by = "me"
    server.push(Reply.error(400, message="Unrecognized request argument supplied: grammar"))
    lm = suggester(server, tmp_path)
    with caplog.at_level(logging.WARNING, logger="ellm.lm"):
        assert lm.suggest(STATE) == ["chop tree", "drink water"]  # asked again, free
        assert lm.suggest(TextState("You see cow.")) == ["chop tree", "drink water"]
    assert ["grammar" in r.body for r in server.requests] == [True, False, False]
    said = [r for r in caplog.records if "refused the constrained answer format" in r.message]
    assert len(said) == 1 and "HTTP 400" in said[0].message
    m = lm.metrics()
    assert (m["constraint_refused"], m["constrained_requests"], m["api_errors"]) == (1, 1, 0)


def test_an_error_that_names_no_constraint_field_is_no_refusal(server, tmp_path):
    server.owned_by = "me"
    server.push(Reply.error(400, message="prompt too long"))
    lm = suggester(server, tmp_path)
    assert lm.suggest(STATE) == []
    assert lm.suggest(TextState("You see cow.")) == ["chop tree", "drink water"]
    assert all("grammar" in r.body for r in server.requests)
    assert (lm.metrics()["constraint_refused"], lm.metrics()["api_errors"]) == (0, 1)


def test_free_text_despite_the_constraint_is_parsed_leniently_and_counted(server, tmp_path):
    server.owned_by = "vllm"  # a vLLM that ignores the field it does not know
    server.push(Reply("Sure! Here you go:\n- chop tree\n- eat grass\n"))
    lm = suggester(server, tmp_path)
    assert lm.suggest(STATE) == ["chop tree", "eat grass"]
    m = lm.metrics()
    assert (m["constraint_violations"], m["parse_errors"]) == (1, 0)


def test_constrained_and_free_answers_never_stand_for_each_other(server, tmp_path):
    server.owned_by = "me"
    server.push(Reply.bullets("attack cow"), Reply.bullets("drink water"))
    free = suggester(server, tmp_path, constrained=False)
    constrained = suggester(server, tmp_path)  # the same cache directory
    assert free.suggest(STATE) == ["attack cow"]
    assert constrained.suggest(STATE) == ["drink water"]
    assert (free.suggest(STATE), constrained.suggest(STATE)) == (["attack cow"], ["drink water"])
    assert len(server.requests) == 2
    free_params = sampling_params(max_tokens=5, temperature=0.0)
    assert "constraint" not in free_params  # free keys are those of before constraints
    keys = {make_key("chat", "m", "p", p, scope="s") for p in (
        free_params, sampling_params(max_tokens=5, temperature=0.0, constraint=GOALS.key()),
        sampling_params(max_tokens=5, temperature=0.0, constraint=YES_NO.key()))}
    assert len(keys) == 3


def test_a_cache_only_replay_with_true_reads_the_constrained_answers(server, tmp_path):
    server.owned_by = "me"
    server.push(Reply.bullets("place stone"))
    assert suggester(server, tmp_path).suggest(STATE) == ["place stone"]
    replay = suggester(server, tmp_path, cache_only=True, constrained=True)
    assert replay.suggest(STATE) == ["place stone"] and len(server.requests) == 1
    assert suggester(server, tmp_path, cache_only=True).suggest(STATE) == []  # auto: off


def test_goals_without_waiting_carry_the_constraint_and_survive_a_refusal(server, tmp_path):
    server.owned_by = "me"
    server.push(Reply.error(400, message="grammar: llama.cpp cannot parse it"),
                Reply.bullets("attack cow"))
    lm = suggester(server, tmp_path, blocking=False)
    assert lm.suggest(STATE) == []  # asked in the background, refused there
    deadline = time.monotonic() + 10
    while lm.in_flight:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert lm.suggest(STATE) == []  # the next visit asks free
    while lm.in_flight:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert lm.suggest(STATE) == ["attack cow"]
    assert ["grammar" in r.body for r in server.requests] == [True, False]
    assert lm.metrics()["constraint_refused"] == 1
    lm.close()
