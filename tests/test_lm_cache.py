"""SQLite answer cache: keys, first answer kept, several processes, crashes, original import."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from ellm.errors import ConfigError
from ellm.games.crafter.prompts import state_description
from ellm.games.crafter.state import TextState
from ellm.games.crafter.suggesters import build_suggester
from ellm.lm import build_client, check_cache
from ellm.lm.import_cache import main as import_main
from lmclient.cache import (
    ANY_ENDPOINT,
    CACHE_FILE,
    AnswerCache,
    CachedAnswer,
    CacheError,
    make_key,
    sampling_params,
)
from lmclient.spec import OPENAI_API_URL, api_url, default_cache_dir

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


SCOPE = "http://127.0.0.1:8080/v1"


def put(cache: AnswerCache, prompt: Any, text: str) -> CachedAnswer:
    params = sampling_params(max_tokens=5, temperature=0)
    key = make_key("chat", "m", prompt, params, scope=SCOPE)
    return cache.put(key, kind="chat", model="m", prompt=prompt, params=params,
                     answer=CachedAnswer("ok", text, prompt_tokens=3), scope=SCOPE)


def key(kind: str, model: str, prompt: Any, params: dict[str, Any], scope: str = SCOPE) -> str:
    return make_key(kind, model, prompt, params, scope=scope)


def test_keys_are_canonical():
    a = sampling_params(max_tokens=200, temperature=0, stop="\n\n")
    b = sampling_params(max_tokens=200.0, temperature=0.0, stop=("\n\n",))
    assert key("completions", "m", "p", a) == key("completions", "m", "p", b)
    assert key("chat", "m", "p", a) != key("completions", "m", "p", a)
    assert key("chat", "m", "p", a) != key("chat", "m2", "p", a)
    assert key("chat", "m", "p", a) != key(
        "chat", "m", "p", sampling_params(max_tokens=200, temperature=0.5, stop="\n\n"))
    # The endpoint is part of the key: a local server's answers never pass for a hosted model's.
    assert key("chat", "m", "p", a) != key("chat", "m", "p", a, scope=OPENAI_API_URL)
    assert key("chat", "m", "p", a) != key("chat", "m", "p", a, scope=ANY_ENDPOINT)


@pytest.mark.parametrize("spelled, url", [
    (None, OPENAI_API_URL),
    ("https://api.openai.com/v1/", OPENAI_API_URL),
    ("HTTPS://API.OpenAI.com:443/v1", OPENAI_API_URL),
    ("http://LocalHost:80/v1//", "http://localhost/v1"),
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
    ("http://user:secret@[::1]:8000/v1?key=secret#x", "http://[::1]:8000/v1"),
])
def test_api_url_spells_an_endpoint_one_way_without_credentials(monkeypatch, spelled, url):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert api_url(spelled) == url


def test_api_url_of_no_base_url_follows_openai_base_url(monkeypatch):
    # The openai client sends requests to $OPENAI_BASE_URL when base_url is not set.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://proxy.example:9000/v1/")
    assert api_url(None) == "http://proxy.example:9000/v1"


@pytest.mark.parametrize("prompt", ["You see \ud800 tree.",
                                    [{"role": "user", "content": "goal: chop \udfff"}]],
                         ids=["text", "chat"])
def test_text_with_lone_surrogates_keys_stores_and_reads_back(tmp_path, prompt):
    # A caption or goal with undecodable bytes: its key differs from that of the same text with
    # a valid character in place of the surrogate, and the entry reads back from the file.
    params = sampling_params(max_tokens=5, temperature=0, stop="\udc80")
    valid = json.loads(json.dumps(prompt).replace("\\ud", "\\uf"))
    assert key("chat", "m", prompt, params) != key("chat", "m", valid, params)
    cache = AnswerCache(tmp_path)
    answer = CachedAnswer("ok", "- chop tree", prompt_tokens=3)
    cache.put(key("chat", "m", prompt, params), kind="chat", model="m", prompt=prompt,
              params=params, answer=answer, scope=SCOPE)
    cache.close()
    assert AnswerCache(tmp_path).get(key("chat", "m", prompt, params)) == answer
    (stored_prompt, stored_params), = sqlite3.connect(tmp_path / CACHE_FILE).execute(
        "SELECT prompt, params FROM answers").fetchall()
    assert json.loads(stored_prompt) == prompt and json.loads(stored_params) == params


def test_first_answer_kept_and_persisted(tmp_path):
    cache = AnswerCache(tmp_path)
    assert put(cache, "p", "first").text == "first"
    assert put(cache, "p", "second").text == "first"
    cache.close()
    again = AnswerCache(tmp_path)
    assert again.get(key("chat", "m", "p", sampling_params(max_tokens=5, temperature=0))
                     ) == CachedAnswer("ok", "first", None, 3, 0, "api")
    assert len(again) == 1 and again.has_model("m", SCOPE)
    assert not again.has_model("x", SCOPE) and not again.has_model("m", OPENAI_API_URL)
    mode = sqlite3.connect(tmp_path / CACHE_FILE).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_default_cache_dir_is_outside_the_source_tree(monkeypatch, tmp_path):
    monkeypatch.delenv("ELLM_CACHE_DIR", raising=False)
    assert default_cache_dir() == Path.home() / ".cache" / "ellm"
    monkeypatch.setenv("ELLM_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path


WRITER = textwrap.dedent("""
    import sys
    from lmclient.cache import AnswerCache, CachedAnswer, make_key, sampling_params
    cache = AnswerCache(sys.argv[1])
    params = sampling_params(max_tokens=5, temperature=0)
    start, stop, tag = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    for i in range(start, stop):
        prompt = f"prompt {i}"
        cache.put(make_key("chat", "m", prompt, params, scope="s"), kind="chat", model="m",
                  prompt=prompt, params=params, answer=CachedAnswer("ok", f"{tag} {i}"),
                  scope="s")
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
    assert "refusing pathlib" in capsys.readouterr().err
    assert import_main([str(tmp_path / "missing.pkl"), "--cache-dir", str(tmp_path)]) == 2
    listing = tmp_path / "list.pkl"
    listing.write_bytes(pickle.dumps([1, 2]))
    assert import_main([str(listing), "--cache-dir", str(tmp_path)]) == 2
    assert "expected a dict" in capsys.readouterr().err


@pytest.mark.e2e
def test_import_of_a_tiny_pickle_that_is_huge_to_hash_exits_2_at_once(tmp_path, capsys):
    from test_no_pickle import SHARED_TUPLE_KEY

    pkl = tmp_path / "lm_cache.pkl"
    pkl.write_bytes(SHARED_TUPLE_KEY)
    assert len(SHARED_TUPLE_KEY) < 160
    proc = subprocess.run([sys.executable, "-m", "ellm.lm.import_cache", str(pkl),
                           "--cache-dir", str(tmp_path / "cache")], capture_output=True,
                          text=True, check=False, env=ENV, cwd=REPO, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [(
        f"error: cannot read the original ELLM cache {pkl}: reading it visits over 50,000,000 "
        "items: its shared references make it far larger than its size")]
    # Entries no key can be made of are skipped, not a crash.
    odd = tmp_path / "odd.pkl"
    odd.write_bytes(pickle.dumps({("m", "p", 5, 10 ** 400, None): "x",
                                  ("m", b"bytes", 5, 0.1, None): "y",
                                  ("m", "p", 5, 0.1, None): "- chop tree"}))
    assert import_main([str(odd), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "imported 1 new entries (0 already present, 2 skipped)" in capsys.readouterr().out


def test_cached_answer_rejects_unknown_status():
    with pytest.raises(ValueError, match="status"):
        CachedAnswer("weird", "")


# ---- a cache that cannot be used stops a run before it starts -----------------------------
def unusable(tmp_path: Path, case: str) -> tuple[Path, Path]:
    """(cache_dir, the path the error must name) of a cache that cannot be used."""
    if case in ("dir-is-a-file", "parent-is-a-file"):
        blocker = tmp_path / "not_a_dir"
        blocker.write_text("a file")
        return (blocker if case == "dir-is-a-file" else blocker / "sub"), blocker
    directory = tmp_path / case
    directory.mkdir()
    if case == "corrupt":
        (directory / CACHE_FILE).write_bytes(b"this is no SQLite file\n" * 100)
    elif case == "bad-row":  # a row no client writes: a status the reader does not know
        corrupt_row(directory, "status = 'pwned'")
    else:  # a cache written by a newer ellm
        AnswerCache(directory).open().close()
        with sqlite3.connect(directory / CACHE_FILE) as conn:
            conn.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    return directory, directory / CACHE_FILE


def corrupt_row(directory: Path, assignment: str) -> None:
    """A cache in ``directory`` with one good answer, then ``UPDATE answers SET assignment``."""
    cache = AnswerCache(directory)
    put(cache, "a prompt", "- chop tree")
    cache.close()
    conn = sqlite3.connect(directory / CACHE_FILE)
    with conn:
        conn.execute(f"UPDATE answers SET {assignment}")
    conn.close()  # the last connection folds the WAL back: the file alone holds the row


@pytest.mark.parametrize("assignment", [
    "status = 'pwned'", "text = X'00ff'",
    f"text = printf('%.*c', {10 ** 6 + 1}, 'x')",
    "payload = 'not json'", "payload = X'7b7d'", "prompt_tokens = -1",
    "completion_tokens = 1e300", "prompt_tokens = 'many'", "source = X'00'",
])
def test_a_row_no_client_writes_is_refused_at_open_and_never_served(tmp_path, assignment):
    corrupt_row(tmp_path, assignment)
    with pytest.raises(CacheError) as refused:
        AnswerCache(tmp_path).open()
    message = str(refused.value)
    assert str(tmp_path / CACHE_FILE) in message and "1 of its answers" in message
    assert "DELETE FROM answers WHERE rowid = 1" in message
    # Written by another process after this one opened the cache: a miss, not a crash.
    good = tmp_path / "good"
    cache = AnswerCache(good)
    put(cache, "a prompt", "- chop tree")  # opened and checked; then tampered with
    with sqlite3.connect(good / CACHE_FILE) as conn:
        conn.execute(f"UPDATE answers SET {assignment}")
    cache._memo.clear()  # what this process remembers of the row it stored
    assert cache.get(key("chat", "m", "a prompt",
                         sampling_params(max_tokens=5, temperature=0))) is None


@pytest.mark.parametrize("case, fix", [
    ("dir-is-a-file", "is a file, not a directory; set env_spec.lm_spec.cache_dir"),
    ("bad-row", "delete those rows"),
    ("parent-is-a-file", "is a file, not a directory; set env_spec.lm_spec.cache_dir"),
    ("corrupt", "move it away or delete it, with its -wal and -shm files"),
    ("newer", "has schema version 99, newer than this ellm's (2): upgrade ellm"),
])
def test_an_unusable_cache_is_refused_at_open_naming_the_file_and_the_fix(tmp_path, case, fix):
    cache_dir, named = unusable(tmp_path, case)
    with pytest.raises(CacheError) as refused:
        AnswerCache(cache_dir).open()
    assert str(named) in str(refused.value) and fix in str(refused.value)
    assert isinstance(refused.value, ConfigError)  # entry points exit 2 on it, as on any key
    spec = {"lm_class": "GPTLanguageModel", "cache_dir": str(cache_dir)}
    with pytest.raises(CacheError, match=re.escape(fix)):
        check_cache(spec)  # what train.py's config check runs
    with pytest.raises(CacheError, match=re.escape(fix)):
        build_client({**spec, "base_url": "http://127.0.0.1:9/v1"})  # before any query
    check_cache({**spec, "dummy_lm": True})  # dummy answers are not cached: nothing to open


def open_unwritable(directory: Path) -> str:
    """The error (or "opened") of opening the cache in ``directory`` by a process that may not
    write there: root writes anywhere, so as root a forked child drops to nobody first."""
    if os.geteuid() != 0:
        return _open_message(directory)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no exec, so the modules imported here serve it
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write, _open_message(directory).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    return message


def _open_message(directory: Path) -> str:
    try:
        AnswerCache(directory).open().close()
    except CacheError as err:
        return str(err)
    return "opened"


NOBODY = 65534


# ---- a crafted cache runs none of its own SQL and is opened only as a regular file ---------
CRAFTED = {  # case: (SQL run on a sound cache, the object the error must name)
    "trigger-rewrites-answers": (
        ("CREATE TRIGGER rewrite AFTER INSERT ON answers BEGIN "
         "UPDATE answers SET text = '- attack' WHERE key = new.key; END"), "trigger rewrite"),
    "trigger-on-meta-hangs": (
        ("CREATE TRIGGER hang BEFORE INSERT ON meta BEGIN SELECT count(*) FROM (WITH RECURSIVE "
         "c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c); END"), "trigger hang"),
    "view": ("CREATE VIEW v AS SELECT * FROM answers", "view v"),
    "table": ("CREATE TABLE extra (x)", "table extra"),
    "index": ("CREATE INDEX answers_text ON answers (text)", "index answers_text"),
    "column": ("ALTER TABLE answers ADD COLUMN evil TEXT DEFAULT 'x'", "table answers"),
    "missing-index": ("DROP INDEX answers_model", "index answers_model"),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_cache_with_a_schema_ellm_does_not_write_is_refused_before_any_write(tmp_path, case):
    cache = AnswerCache(tmp_path)
    put(cache, "a prompt", "- chop tree")
    cache.close()
    sql, named = CRAFTED[case]
    conn = sqlite3.connect(tmp_path / CACHE_FILE)
    conn.execute(sql)
    conn.close()
    with pytest.raises(CacheError) as refused:
        AnswerCache(tmp_path).open()
    message = str(refused.value)
    assert f"the LM answer cache {tmp_path / CACHE_FILE} cannot be used" in message
    assert "its schema is not the one ellm writes" in message and named in message
    # Nothing ran: the meta row the open would have rewritten is as it was.
    conn = sqlite3.connect(tmp_path / CACHE_FILE)
    assert conn.execute("SELECT text FROM answers").fetchall() == [("- chop tree",)]
    assert conn.execute("SELECT * FROM meta").fetchall() == [("schema_version", "2")]


@pytest.mark.parametrize("link", [CACHE_FILE, f"{CACHE_FILE}-wal", f"{CACHE_FILE}-shm",
                                  "dangling"])
def test_a_cache_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path, link):
    target = tmp_path / "precious.txt"
    if link != "dangling":
        target.write_text("precious\n")
    directory = tmp_path / "cache"
    directory.mkdir()
    named = directory / (CACHE_FILE if link == "dangling" else link)
    named.symlink_to(target)
    with pytest.raises(CacheError) as refused:
        AnswerCache(directory).open()
    assert f"{named} is a symlink" in str(refused.value)
    if link == "dangling":
        assert not target.exists()
    else:
        assert target.read_text() == "precious\n"


def test_a_cache_file_that_is_a_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / CACHE_FILE)  # SQLite would block reading it
    with pytest.raises(CacheError, match=re.escape(f"{tmp_path / CACHE_FILE} is not a regular "
                                                   "file")):
        AnswerCache(tmp_path).open()


def test_a_query_past_its_time_bound_is_interrupted(tmp_path):
    cache = AnswerCache(tmp_path, query_timeout_s=0.2).open()
    endless = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
               "SELECT count(*) FROM c")
    started = time.monotonic()
    with pytest.raises(CacheError, match=re.escape(f"reading the LM answer cache "
                                                   f"{tmp_path / CACHE_FILE} failed: it ran "
                                                   "past 0.2 s")):
        cache._query(endless)
    assert time.monotonic() - started < 10
    assert put(cache, "p", "still usable").text == "still usable"


@pytest.mark.parametrize("existing", [False, True], ids=["read-only-dir", "read-only-cache"])
def test_a_cache_that_cannot_be_written_is_refused_at_open(existing):
    # Under /tmp itself: the child that drops to nobody must reach it (pytest's tmp_path is
    # private to its user).
    directory = Path(tempfile.mkdtemp(prefix="ellm-readonly-"))
    try:
        if existing:
            assert put(AnswerCache(directory), "p", "answer").text == "answer"
            (directory / CACHE_FILE).chmod(0o444)
        directory.chmod(0o555)
        message = open_unwritable(directory)
        assert f"the LM answer cache {directory / CACHE_FILE} cannot be used" in message
        assert f"make {directory} writable or set env_spec.lm_spec.cache_dir" in message
    finally:
        directory.chmod(0o755)
        shutil.rmtree(directory)


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["dir-is-a-file", "corrupt", "bad-row"])
def test_train_with_an_unusable_cache_exits_2_before_the_run_starts(train, tmp_path, case):
    cache_dir, named = unusable(tmp_path, case)
    overrides = ["exp_name=BADCACHE", "env_spec.lm_spec.lm_class=GPTLanguageModel",
                 "env_spec.lm_spec.base_url=http://127.0.0.1:9/v1"]
    if case in ("corrupt", "bad-row"):  # the default cache: $ELLM_CACHE_DIR (the test's own)
        default = tmp_path / "lm_cache"
        default.mkdir()
        shutil.copy(named, default / CACHE_FILE)
        named = default / CACHE_FILE
    else:
        overrides.append(f"env_spec.lm_spec.cache_dir={cache_dir}")
    proc = train(*overrides, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"error: the LM answer cache {named}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "exp_local").exists()


OLD_SCHEMA = """CREATE TABLE answers (key TEXT PRIMARY KEY, kind TEXT NOT NULL,
    model TEXT NOT NULL, prompt TEXT NOT NULL, params TEXT NOT NULL, status TEXT NOT NULL,
    text TEXT NOT NULL, payload TEXT, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, source TEXT NOT NULL, created REAL NOT NULL);
CREATE INDEX answers_model ON answers (model);
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');"""


def test_an_old_cache_is_upgraded_and_its_entries_never_served(server, tmp_path, no_real_keys):
    # Version 1 keyed answers by model only: an entry may be any server's answer.
    prompt = [{"role": "user", "content": "You see tree."}]
    params = sampling_params(max_tokens=200, temperature=0.1, stop="\n\n")
    blob = json.dumps(["chat", "test-model", prompt, params], sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    old_key = hashlib.sha256(blob.encode()).hexdigest()
    with sqlite3.connect(tmp_path / CACHE_FILE) as conn:
        conn.executescript(OLD_SCHEMA)
        conn.execute("INSERT INTO answers VALUES (?, 'chat', 'test-model', ?, ?, 'ok', "
                     "'- old answer', NULL, 1, 1, 'api', 0)",
                     (old_key, json.dumps(prompt), json.dumps(params, sort_keys=True)))
    client = build_client({"lm_class": "GPTLanguageModel", "lm": "test-model"},
                          cache_dir=tmp_path, base_url=server.base_url)
    assert not client.cache.has_model("test-model", client.scope)
    assert client.complete(prompt) == "- chop tree\n- drink water"  # asked, not the old entry
    assert client.complete(prompt) == "- chop tree\n- drink water"  # now cached
    shared = build_client({"lm_class": "GPTLanguageModel", "lm": "test-model",
                           "cache_scope": "model"}, cache_dir=tmp_path, base_url=server.base_url)
    assert shared.complete(prompt) == "- chop tree\n- drink water"  # nor for model scope
    assert len(server.requests) == 2
    conn = sqlite3.connect(tmp_path / CACHE_FILE)
    assert conn.execute("SELECT value FROM meta").fetchall() == [("2",)]
    assert sorted(conn.execute("SELECT text, scope FROM answers")) == [
        ("- chop tree\n- drink water", "*"), ("- chop tree\n- drink water", server.base_url),
        ("- old answer", "")]
