"""Persistent LM answer cache: one SQLite file shared by every run and process of a sweep.

Key = sha256 of (endpoint kind, model, prompt, sampling parameters) in canonical JSON. The first
answer stored for a key is kept forever (ELLM.md §3: the LM is a deterministic function of the
prompt), including malformed answers, so a bad answer is never re-queried.

Safety: WAL journal + busy timeout let several processes read and write at once; each write is
one transaction, so a crash leaves either the whole entry or none. Within a process, the
threads of the non-blocking mode share one connection under a lock. WAL needs a local file system
(not NFS): put ``cache_dir`` on local disk on clusters.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

CACHE_FILE: Final = "lm_cache.sqlite3"
SCHEMA_VERSION: Final = 1
BUSY_TIMEOUT_S: Final = 60.0
STATUSES: Final = ("ok", "malformed")

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    text TEXT NOT NULL,
    payload TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    source TEXT NOT NULL,
    created REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS answers_model ON answers (model)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


@dataclass(frozen=True)
class CachedAnswer:
    """One stored answer. ``payload`` holds structured data (e.g. top logprobs)."""

    status: str
    text: str
    payload: Any = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    source: str = "api"

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"cache status must be one of {STATUSES}, got {self.status!r}")


def sampling_params(*, max_tokens: int, temperature: float, stop: Any = None,
                    **extra: Any) -> dict[str, Any]:
    """Canonical sampling parameters (so 0 and 0.0, "x" and ["x"] give the same key)."""
    if isinstance(stop, str):
        stop = [stop]
    elif stop is not None:
        stop = [str(s) for s in stop] or None
    params = {"max_tokens": int(max_tokens), "temperature": float(temperature), "stop": stop}
    params.update(extra)
    return params


def make_key(kind: str, model: str, prompt: Any, params: dict[str, Any]) -> str:
    """Stable hex key of a request (independent of dict order and hash seed)."""
    blob = json.dumps([kind, model, prompt, params], sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache:
    """SQLite-backed answer cache with an in-process read-through memo."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser()
        self.path = self.directory / CACHE_FILE
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._memo: dict[str, CachedAnswer] = {}
        # Serialises the connection: the non-blocking mode's worker threads store answers.
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"AnswerCache({str(self.path)!r})"

    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross fork(): reopen in a child process.
        if self._conn is None or self._pid != os.getpid():
            self.directory.mkdir(parents=True, exist_ok=True)
            # Two processes opening a new cache at once: switching it to WAL can answer
            # "database is locked" at once, without SQLite's busy handler; retry until the
            # busy timeout, as any other lock wait.
            deadline = time.monotonic() + BUSY_TIMEOUT_S
            while True:
                try:
                    conn = self._open()
                    break
                except sqlite3.OperationalError as err:
                    if "locked" not in str(err) or time.monotonic() > deadline:
                        raise RuntimeError(f"cannot open the LM cache {self.path}: {err}") from err
                    time.sleep(0.05)
                except sqlite3.Error as err:
                    raise RuntimeError(f"cannot open the LM cache {self.path}: {err}") from err
            self._conn, self._pid, self._memo = conn, os.getpid(), {}
        return self._conn

    def _open(self) -> sqlite3.Connection:
        """A connection in WAL mode with the schema in place (closed again if that fails)."""
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            with _transaction(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
        except BaseException:
            conn.close()
            raise
        return conn

    def get(self, key: str) -> CachedAnswer | None:
        """The stored answer for ``key`` or None."""
        with self._lock:
            if key in self._memo:
                return self._memo[key]
            row = self._connection().execute(
                "SELECT status, text, payload, prompt_tokens, completion_tokens, source "
                "FROM answers WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            answer = CachedAnswer(row[0], row[1], json.loads(row[2]) if row[2] else None,
                                  row[3], row[4], row[5])
            self._memo[key] = answer
            return answer

    def put(self, key: str, *, kind: str, model: str, prompt: Any, params: dict[str, Any],
            answer: CachedAnswer) -> CachedAnswer:
        """Store ``answer`` unless the key is taken; return the answer that is stored."""
        with self._lock:
            conn = self._connection()
            with _transaction(conn):
                conn.execute(_INSERT, _row(key, kind, model, prompt, params, answer))
            self._memo.pop(key, None)
            stored = self.get(key)
        if stored is None:
            raise RuntimeError(f"LM cache entry {key} missing right after insert in {self.path}")
        return stored

    def put_many(self, rows: list[tuple[str, str, str, Any, dict[str, Any], CachedAnswer]]
                 ) -> int:
        """Insert (key, kind, model, prompt, params, answer) rows in one transaction; return
        how many were new."""
        with self._lock:
            conn = self._connection()
            with _transaction(conn):
                before = conn.total_changes
                conn.executemany(_INSERT, [_row(*row) for row in rows])
                new = conn.total_changes - before
            self._memo.clear()
        return new

    def has_model(self, model: str) -> bool:
        """True when at least one answer of ``model`` is stored."""
        with self._lock:
            return self._connection().execute(
                "SELECT 1 FROM answers WHERE model = ? LIMIT 1", (model,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return self._connection().execute("SELECT COUNT(*) FROM answers").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn, self._memo = None, {}


_INSERT: Final = "INSERT OR IGNORE INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


def _row(key: str, kind: str, model: str, prompt: Any, params: dict[str, Any],
         answer: CachedAnswer) -> tuple[Any, ...]:
    payload = json.dumps(answer.payload) if answer.payload is not None else None
    return (key, kind, model, json.dumps(prompt, ensure_ascii=False),
            json.dumps(params, sort_keys=True), answer.status, answer.text, payload,
            answer.prompt_tokens, answer.completion_tokens, answer.source, time.time())


class _transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rollback on error) for an autocommit connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
