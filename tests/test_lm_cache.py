"""SQLite answer cache: keys, first answer kept, several processes, crashes, original import."""

from __future__ import annotations

import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ellm.lm import TextState, build_suggester
from ellm.lm.cache import CACHE_FILE, AnswerCache, CachedAnswer, make_key, sampling_params
from ellm.lm.config import default_cache_dir
from ellm.lm.import_cache import main as import_main
from ellm.lm.prompts import state_description

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def put(cache: AnswerCache, prompt: str, text: str) -> CachedAnswer:
    params = sampling_params(max_tokens=5, temperature=0)
    key = make_key("chat", "m", prompt, params)
    return cache.put(key, kind="chat", model="m", prompt=prompt, params=params,
                     answer=CachedAnswer("ok", text, prompt_tokens=3))


def test_keys_are_canonical():
    a = sampling_params(max_tokens=200, temperature=0, stop="\n\n")
    b = sampling_params(max_tokens=200.0, temperature=0.0, stop=("\n\n",))
    assert make_key("completions", "m", "p", a) == make_key("completions", "m", "p", b)
    assert make_key("chat", "m", "p", a) != make_key("completions", "m", "p", a)
    assert make_key("chat", "m", "p", a) != make_key("chat", "m2", "p", a)
    assert make_key("chat", "m", "p", a) != make_key(
        "chat", "m", "p", sampling_params(max_tokens=200, temperature=0.5, stop="\n\n"))


def test_first_answer_kept_and_persisted(tmp_path):
    cache = AnswerCache(tmp_path)
    assert put(cache, "p", "first").text == "first"
    assert put(cache, "p", "second").text == "first"
    cache.close()
    again = AnswerCache(tmp_path)
    key = make_key("chat", "m", "p", sampling_params(max_tokens=5, temperature=0))
    assert again.get(key) == CachedAnswer("ok", "first", None, 3, 0, "api")
    assert len(again) == 1 and again.has_model("m") and not again.has_model("x")
    mode = sqlite3.connect(tmp_path / CACHE_FILE).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_default_cache_dir_is_outside_the_source_tree(monkeypatch, tmp_path):
    monkeypatch.delenv("ELLM_CACHE_DIR", raising=False)
    assert default_cache_dir() == Path.home() / ".cache" / "ellm"
    monkeypatch.setenv("ELLM_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path


WRITER = textwrap.dedent("""
    import sys
    from ellm.lm.cache import AnswerCache, CachedAnswer, make_key, sampling_params
    cache = AnswerCache(sys.argv[1])
    params = sampling_params(max_tokens=5, temperature=0)
    start, stop, tag = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    for i in range(start, stop):
        prompt = f"prompt {i}"
        cache.put(make_key("chat", "m", prompt, params), kind="chat", model="m",
                  prompt=prompt, params=params, answer=CachedAnswer("ok", f"{tag} {i}"))
        if i == start:
            print("ready", flush=True)
    print("done", flush=True)
""")


def writer(cache_dir: Path, start: int, stop: int, tag: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(cache_dir), str(start),
                             str(stop), tag], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, cwd=REPO)


def test_concurrent_writers_share_one_cache(tmp_path):
    procs = [writer(tmp_path, 0, 150, "a"), writer(tmp_path, 50, 200, "b")]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.split() == ["ready", "done"]
    rows = dict(sqlite3.connect(tmp_path / CACHE_FILE).execute(
        "SELECT prompt, text FROM answers").fetchall())
    assert len(rows) == 200
    assert rows['"prompt 0"'] == "a 0" and rows['"prompt 199"'] == "b 199"
    assert all(rows[f'"prompt {i}"'] in (f"a {i}", f"b {i}") for i in range(50, 150))


def test_killed_writer_leaves_a_sound_cache(tmp_path):
    proc = writer(tmp_path, 0, 10**6, "k")
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    conn = sqlite3.connect(tmp_path / CACHE_FILE)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    count = conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
    assert count >= 1
    texts = [t for (t,) in conn.execute("SELECT text FROM answers")]
    assert all(t.startswith("k ") for t in texts)
    assert put(AnswerCache(tmp_path), "after crash", "fine").text == "fine"


@pytest.mark.e2e
def test_import_original_cache_and_replay_it(tmp_path, capsys):
    template = "Scenes and goals.\n{state} What now?\n"
    state = TextState("You see tree.", "You have in your inventory wood.")
    prompt = template.replace("{state}", state_description(state))
    original = {
        ("code-davinci-002", prompt, 200, 0.1, "\n\n"): "- chop tree\n- place crafting table",
        ("code-davinci-002", "other prompt", 200, 0.1, "\n\n"): "",
        ("code-davinci-002", "bad key"): "skipped",
    }
    pkl = tmp_path / "lm_cache.pkl"
    pkl.write_bytes(pickle.dumps(original))
    cache_dir = tmp_path / "cache"
    assert import_main([str(pkl), "--cache-dir", str(cache_dir)]) == 0
    assert "imported 2 new entries (0 already present, 1 skipped)" in capsys.readouterr().out
    out = subprocess.run([sys.executable, "-m", "ellm.lm.import_cache", str(pkl),
                          "--cache-dir", str(cache_dir)], capture_output=True, text=True,
                         check=False, env=ENV, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "imported 0 new entries (2 already present, 1 skipped)" in out.stdout
    (tmp_path / "prompt.txt").write_text(template)
    spec = {"lm_class": "GPTLanguageModel", "lm": "code-davinci-002", "endpoint": "completions",
            "temperature": 0.1, "max_tokens": 200, "prompt_file": str(tmp_path / "prompt.txt")}
    lm = build_suggester(spec, all_goals=[], cache_dir=cache_dir)  # retired: cache-only replay
    assert lm.suggest(state) == ["chop tree", "place crafting table"]
    assert lm.suggest(TextState("You see water.")) == []
    m = lm.metrics()
    assert (m["cache_hits"], m["cache_misses"], m["api_calls"]) == (1, 1, 0)


def test_import_refuses_foreign_objects_and_bad_files(tmp_path, capsys):
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({("m", "p", 1, 0.0, None): Path("/")}))
    assert import_main([str(evil), "--cache-dir", str(tmp_path)]) == 2
    assert "refusing to load pathlib" in capsys.readouterr().err
    assert import_main([str(tmp_path / "missing.pkl"), "--cache-dir", str(tmp_path)]) == 2
    listing = tmp_path / "list.pkl"
    listing.write_bytes(pickle.dumps([1, 2]))
    assert import_main([str(listing), "--cache-dir", str(tmp_path)]) == 2
    assert "expected a dict" in capsys.readouterr().err


def test_cached_answer_rejects_unknown_status():
    with pytest.raises(ValueError, match="status"):
        CachedAnswer("weird", "")
