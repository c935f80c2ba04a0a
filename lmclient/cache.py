"""Persistent LM answer cache: one SQLite file shared by every run and process of a sweep.

The first answer stored for a key is kept forever (ELLM.md §3: the LM is a deterministic
function of the prompt). WAL lets processes share it; it needs a local file system, not NFS.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lmclient.errors import ConfigError

CACHE_FILE: Final = "lm_cache.sqlite3"
# 2: the ``scope`` column; rows of version 1 are never served.
SCHEMA_VERSION: Final = 2
BUSY_TIMEOUT_S: Final = 60.0
# No query of ours takes seconds, even on a cache of millions of answers: past this, one is
# interrupted (a crafted file must not hang a run).
QUERY_TIMEOUT_S: Final = 60.0
_PROGRESS_STEPS: Final = 10_000  # SQLite VM steps between two looks at the clock
STATUSES: Final = ("ok", "malformed")
ANY_ENDPOINT: Final = "*"
WHERE: Final = "env_spec.lm_spec.cache_dir (or $ELLM_CACHE_DIR)"
# A cache is a file a colleague may send: bound what a row may hold.
MAX_ANSWER_CHARS: Final = 1_000_000
MAX_TOKENS_COUNTED: Final = 10_000_000
_BAD_ROW: Final = (
    f"status NOT IN {STATUSES!r} OR typeof(text) != 'text' OR length(text) > {MAX_ANSWER_CHARS}"
    " OR (payload IS NOT NULL AND (typeof(payload) != 'text' OR NOT json_valid(payload)))"
    " OR typeof(prompt_tokens) != 'integer' OR typeof(completion_tokens) != 'integer'"
    f" OR prompt_tokens < 0 OR completion_tokens < 0 OR prompt_tokens > {MAX_TOKENS_COUNTED}"
    f" OR completion_tokens > {MAX_TOKENS_COUNTED} OR typeof(source) != 'text'"
    " OR typeof(key) != 'text' OR length(key) != 64"
)

_SCOPE_COLUMN: Final = "scope TEXT NOT NULL DEFAULT ''"
_SCHEMA: Final = (
    f"""CREATE TABLE IF NOT EXISTS answers (
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
    created REAL NOT NULL,
    {_SCOPE_COLUMN}
)""",
    "CREATE INDEX IF NOT EXISTS answers_model ON answers (model)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


class CacheError(ConfigError):
    """The answer cache cannot be used; the message names the file and the fix."""


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
                    constraint: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """Canonical sampling parameters (so 0 and 0.0, "x" and ["x"] give the same key); the
    constraint is part of them, so constrained and free answers never stand for each other.
    """
    if isinstance(stop, str):
        stop = [stop]
    elif stop is not None:
        stop = [str(s) for s in stop] or None
    params = {"max_tokens": int(max_tokens), "temperature": float(temperature), "stop": stop}
    if constraint is not None:
        params["constraint"] = constraint
    params.update(extra)
    return params


def make_key(kind: str, model: str, prompt: Any, params: dict[str, Any], *, scope: str) -> str:
    """Stable hex key of a request to ``model`` at ``scope`` (no dict order or hash seed in it)."""
    blob = json.dumps([scope, kind, model, prompt, params], sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


class AnswerCache:
    """SQLite-backed answer cache with an in-process read-through memo."""

    def __init__(self, directory: str | Path, *, query_timeout_s: float = QUERY_TIMEOUT_S
                 ) -> None:
        self.directory = Path(directory).expanduser()
        self.path = self.directory / CACHE_FILE
        self.query_timeout_s = query_timeout_s
        self._deadline = math.inf
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._memo: dict[str, CachedAnswer] = {}
        # Serialises the connection: the non-blocking mode's worker threads store answers.
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"AnswerCache({str(self.path)!r})"

    def open(self) -> AnswerCache:
        """Open the cache now, so one that cannot be used fails before a run starts, not mid-run."""
        with self._lock:
            self._connection()
        return self

    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross fork(): reopen in a child process.
        if self._conn is None or self._pid != os.getpid():
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._refuse_special_files()
                conn = self._open_waiting()
            except (OSError, sqlite3.Error) as err:
                raise CacheError(self._unusable(err)) from None
            self._conn, self._pid, self._memo = conn, os.getpid(), {}
        return self._conn

    def _open_waiting(self) -> sqlite3.Connection:
        # A new cache's switch to WAL can fail "database is locked" without the busy handler:
        # retry until the busy timeout.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                return self._open()
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _open(self) -> sqlite3.Connection:
        """A connection in WAL mode with the schema; writing the version checks writability."""
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.set_progress_handler(self._overdue, _PROGRESS_STEPS)
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            # Behind the schema check: SQL stored in the file may call no function with effects.
            conn.execute("PRAGMA trusted_schema=OFF")
            if hasattr(conn, "setconfig"):  # Python 3.12+
                conn.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)
            with self._bounded():
                self._check_schema(conn)  # before the first write: a trigger fires on writes
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            with _transaction(conn), self._bounded():
                for statement in _SCHEMA:
                    conn.execute(statement)
                self._upgrade(conn)
            with self._bounded():
                self._check_rows(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _refuse_special_files(self) -> None:
        """SQLite follows a symlink and opens a FIFO or a device: the cache and its companion
        files must be regular files in the directory itself, or not yet exist."""
        for path in (self.path, *(Path(f"{self.path}{end}") for end in _COMPANIONS)):
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(mode):
                kind = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
                raise CacheError(
                    f"the LM answer cache {self.path} cannot be used: {path} is {kind}, and "
                    "ellm opens only a regular file there; move it away, or set "
                    f"{WHERE} to another directory")

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """Refuse a file whose tables, indexes, triggers or views are not exactly ours: a
        trigger or view in a crafted cache would run its author's SQL on our reads and writes."""
        found = frozenset((kind, name, table, _normal(sql)) for kind, name, table, sql
                          in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        if not found or found in _EXPECTED:
            return  # a new file, or one ellm made
        nearest = min(_EXPECTED, key=lambda expected: len(found ^ expected))
        odd = sorted({f"{kind} {name}" for kind, name, *_ in found ^ nearest})
        raise CacheError(
            f"the LM answer cache {self.path} cannot be used: its schema is not the one ellm "
            f"writes (not ellm's, altered or missing: {', '.join(odd)}), so it may be a crafted "
            "file whose SQL would run on every read and write; move it away with its -wal and "
            f"-shm files, or set {WHERE} to another directory")

    @contextlib.contextmanager
    def _bounded(self) -> Iterator[None]:
        """Interrupt the statements run inside after ``query_timeout_s``."""
        self._deadline = time.monotonic() + self.query_timeout_s
        try:
            yield
        finally:
            self._deadline = math.inf

    def _overdue(self) -> bool:
        return time.monotonic() > self._deadline

    def _check_rows(self, conn: sqlite3.Connection) -> None:
        """Refuse, before a run starts, a cache holding rows no client writes (a crafted file)."""
        bad = conn.execute(f"SELECT COUNT(*), MIN(rowid) FROM answers WHERE {_BAD_ROW}").fetchone()
        if bad[0]:
            raise CacheError(
                f"the LM answer cache {self.path} cannot be used: {bad[0]} of its answers are not "
                f"what ellm writes (the first at rowid {bad[1]}: a status other than "
                f"{'/'.join(STATUSES)}, a text over {MAX_ANSWER_CHARS:,} characters or not text, "
                "a payload that is not JSON, or a token count that is not a whole number in "
                "range); delete those rows (sqlite3 FILE \"DELETE FROM answers WHERE rowid = "
                f"{bad[1]}\", and any others), move the file away with its -wal and -shm files "
                f"when no run is using it, or set {WHERE} to another directory")

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        version = int(row[0]) if row is not None and str(row[0]).isdigit() else SCHEMA_VERSION
        if version > SCHEMA_VERSION:
            raise CacheError(f"the LM answer cache {self.path} has schema version {version}, "
                             f"newer than this ellm's ({SCHEMA_VERSION}): upgrade ellm, or set "
                             f"{WHERE} to another directory")
        if "scope" not in {column[1] for column in conn.execute("PRAGMA table_info(answers)")}:
            conn.execute(f"ALTER TABLE answers ADD COLUMN {_SCOPE_COLUMN}")
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                     (str(SCHEMA_VERSION),))

    def _unusable(self, err: Exception) -> str:
        """Why the cache cannot be used, and what to do about it."""
        blocker = _file_in_the_way(self.directory)
        if blocker is not None:
            why = (f"{blocker} is a file, not a directory; set {WHERE} to a directory "
                   "(or move the file away)")
        elif _interrupted(err):
            why = (f"a query on it ran past {self.query_timeout_s:g} s, so it may be a crafted "
                   f"file; move it away with its -wal and -shm files, or set {WHERE} to another "
                   "directory")
        elif isinstance(err, sqlite3.DatabaseError) and not isinstance(
                err, sqlite3.OperationalError):
            why = (f"it is not a sound SQLite file ({err}); move it away or delete it, with "
                   "its -wal and -shm files, when no run is using it (a new, empty cache is "
                   f"made in its place), or set {WHERE} to another directory")
        else:
            why = (f"it cannot be created or written ({err}); make {self.directory} writable "
                   f"or set {WHERE} to a writable directory")
        return f"the LM answer cache {self.path} cannot be used: {why}"

    def get(self, key: str) -> CachedAnswer | None:
        """The stored answer for ``key`` or None."""
        with self._lock:
            if key in self._memo:
                return self._memo[key]
            rows = self._query(
                "SELECT status, text, payload, prompt_tokens, completion_tokens, source "
                "FROM answers WHERE key = ?", (key,))
            if not rows:
                return None
            answer = _answer(rows[0])
            if answer is not None:
                self._memo[key] = answer
            return answer

    def put(self, key: str, *, kind: str, model: str, prompt: Any, params: dict[str, Any],
            answer: CachedAnswer, scope: str) -> CachedAnswer:
        """Store ``answer`` unless the key is taken; return the answer that is stored."""
        with self._lock:
            self._write(_INSERT, [_row(key, kind, model, prompt, params, answer, scope)])
            self._memo.pop(key, None)
            stored = self.get(key)
        if stored is None:
            raise CacheError(f"LM cache entry {key} missing right after insert in {self.path}")
        return stored

    def put_many(self, rows: list[tuple[str, str, str, Any, dict[str, Any], CachedAnswer, str]]
                 ) -> int:
        """Insert rows in one transaction; return how many were new."""
        with self._lock:
            new = self._write(_INSERT, [_row(*row) for row in rows])
            self._memo.clear()
        return new

    def has_model(self, model: str, scope: str) -> bool:
        """True when at least one answer of ``model`` at ``scope`` is stored."""
        return bool(self._query("SELECT 1 FROM answers WHERE model = ? AND scope = ? LIMIT 1",
                                (model, scope)))

    def __len__(self) -> int:
        return self._query("SELECT COUNT(*) FROM answers")[0][0]

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            conn = self._connection()
            try:
                with self._bounded():
                    return conn.execute(sql, args).fetchall()
            except sqlite3.Error as err:
                raise CacheError(self._failed("reading", err)) from err

    def _write(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        """Run ``sql`` on each row in one transaction; the number of rows changed."""
        with self._lock:
            conn = self._connection()
            try:
                with _transaction(conn), self._bounded():
                    before = conn.total_changes
                    conn.executemany(sql, rows)
                    return conn.total_changes - before
            except sqlite3.Error as err:
                raise CacheError(self._failed("writing to", err)) from err

    def _failed(self, doing: str, err: sqlite3.Error) -> str:
        why = f"it ran past {self.query_timeout_s:g} s" if _interrupted(err) else str(err)
        return f"{doing} the LM answer cache {self.path} failed: {why}"

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn, self._memo = None, {}


_COMPANIONS: Final = ("-wal", "-shm", "-journal")
_TOKEN: Final = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\w+|\S")


def _normal(sql: str | None) -> str:
    """``sql`` with its tokens one space apart (SQLite keeps a schema as it was spelled)."""
    return " ".join(_TOKEN.findall(sql or ""))


def _expected_schemas() -> tuple[frozenset[tuple[str, str, str, str]], ...]:
    """``sqlite_master`` of each cache ellm made: this version's, and version 1's (no scope
    column; once upgraded it reads as this version's)."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
        now = frozenset((kind, name, table, _normal(sql)) for kind, name, table, sql
                        in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
    finally:
        conn.close()
    scope = " " + _normal(f", {_SCOPE_COLUMN}")
    return now, frozenset((kind, name, table, sql.replace(scope, "")) for kind, name, table, sql
                          in now)


_EXPECTED: Final = _expected_schemas()


def _interrupted(err: BaseException) -> bool:
    """True for the error of a statement the progress handler stopped."""
    return isinstance(err, sqlite3.OperationalError) and str(err) == "interrupted"


_INSERT: Final = (
    "INSERT OR IGNORE INTO answers (key, kind, model, prompt, params, status, text, payload, "
    "prompt_tokens, completion_tokens, source, created, scope) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def _answer(row: tuple[Any, ...]) -> CachedAnswer | None:
    """A stored row as an answer, or None for a row no client writes."""
    status, text, payload, prompt_tokens, completion_tokens, source = row
    try:
        ok = (status in STATUSES and isinstance(text, str) and len(text) <= MAX_ANSWER_CHARS
              and all(isinstance(n, int) and 0 <= n <= MAX_TOKENS_COUNTED
                      for n in (prompt_tokens, completion_tokens))
              and isinstance(source, str) and (payload is None or isinstance(payload, str)))
        decoded = json.loads(payload) if ok and payload else None
    except (ValueError, RecursionError):
        ok = False
    return CachedAnswer(status, text, decoded, prompt_tokens, completion_tokens,
                        source) if ok else None


def _row(key: str, kind: str, model: str, prompt: Any, params: dict[str, Any],
         answer: CachedAnswer, scope: str) -> tuple[Any, ...]:
    payload = json.dumps(answer.payload) if answer.payload is not None else None
    return (key, kind, model, json.dumps(prompt), json.dumps(params, sort_keys=True),
            answer.status, answer.text, payload, answer.prompt_tokens,
            answer.completion_tokens, answer.source, time.time(), scope)


def _file_in_the_way(directory: Path) -> Path | None:
    """The file standing where ``directory`` or one of its parents should be, if any."""
    for path in (directory, *directory.parents):
        try:
            if path.exists():
                return None if path.is_dir() else path
        except OSError:
            return None
    return None


class _transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rollback on error) for an autocommit connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
