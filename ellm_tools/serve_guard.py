"""What the packaged server (:mod:`ellm_tools.serve`) refuses before llama.cpp sees it, and what it
knows when its model process dies: llama.cpp trusts its input, so a deep grammar would kill the
process holding the model, and a huge prompt would be tokenised for a minute (docs/lm.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

MAX_BODY_BYTES: Final = 1024 * 1024  # --max-body-kb's default: ~250k tokens of text
MAX_GRAMMAR_CHARS: Final = 64 * 1024  # the game's goal-list grammars take ~2-4k
MAX_GRAMMAR_DEPTH: Final = 32  # nested groups; ours nest 3 deep
FLIGHT_BYTES: Final = 2048

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


# GBNF's tokens as llama.cpp's parser reads them: a comment runs from ``#`` to the end of the
# line; a literal and a character class end at their first unescaped quote or ``]``; a token
# (``<...>``, ``!<...>``) at its first ``>``, with no escapes. Only a parenthesis outside all of
# them opens or closes a group. One left open runs to the end, where llama.cpp stops too.
_GBNF_TOKEN: Final = re.compile(
    r"""#[^\r\n]*|"(?:\\.|[^"\\])*"?|\[(?:\\.|[^\]\\])*\]?|<[^>]*>?|[()]""", re.DOTALL)


def grammar_depth(grammar: str) -> int:
    """How deep llama.cpp's parser recurses into ``grammar``: one level per group."""
    depth = deepest = 0
    for token in _GBNF_TOKEN.finditer(grammar):
        if token[0] == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif token[0] == ")":
            depth = max(depth - 1, 0)  # llama.cpp stops at a stray one; never count below 0
    return deepest


def grammar_problem(grammar: str) -> str | None:
    """Why llama.cpp must not parse ``grammar`` (GBNF), or None: too long or nested too deep."""
    if len(grammar) > MAX_GRAMMAR_CHARS:
        return f"grammar: {len(grammar):,} characters, over the server's {MAX_GRAMMAR_CHARS:,}"
    deepest = grammar_depth(grammar)
    if deepest > MAX_GRAMMAR_DEPTH:
        return (f"grammar: groups nested {deepest} deep, over the server's "
                f"{MAX_GRAMMAR_DEPTH}")
    return None


class InFlight:
    """The requests being answered, in a buffer shared with the supervising process, so a crash
    is reported with them, not with a guess."""

    def __init__(self, buffer: Any = None) -> None:
        self.buffer = buffer
        self.lines: dict[int, str] = {}

    def start(self, key: int, line: str) -> None:
        self.lines[key] = line
        self._write()

    def end(self, key: int) -> None:
        self.lines.pop(key, None)
        self._write()

    def _write(self) -> None:
        if self.buffer is None:
            return
        text = "\n".join(self.lines.values()).encode("utf-8", "replace")[:FLIGHT_BYTES - 1]
        self.buffer.value = text

    @staticmethod
    def read(buffer: Any) -> list[str]:
        raw = bytes(buffer.value) if buffer is not None else b""
        return [line for line in raw.decode("utf-8", "replace").splitlines() if line]


class RequestGuard:
    """ASGI middleware: bodies over ``max_body`` bytes answered 413, each request noted in
    ``in_flight`` while it is answered."""

    def __init__(self, app: Callable[..., Awaitable[None]], max_body: int,
                 in_flight: InFlight | None = None) -> None:
        self.app, self.max_body = app, max_body
        self.in_flight = in_flight or InFlight()
        self._next = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        declared = headers.get("content-length", "")
        if declared and (not declared.isdigit() or int(declared) > self.max_body):
            await _refuse(send, 413, f"request body of {declared} bytes: over the server's "
                                     f"{self.max_body:,} (--max-body-kb)")
            return
        body = await _read_body(receive, self.max_body)
        if body is None:
            await _refuse(send, 413, f"request body over the server's {self.max_body:,} bytes "
                                     "(--max-body-kb)")
            return
        replayed = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        self._next += 1
        key = self._next
        self.in_flight.start(key, f"{scope.get('method', '?')} {scope.get('path', '?')} "
                                  f"({len(body):,} bytes)")
        try:
            await self.app(scope, replay, send)
        finally:
            self.in_flight.end(key)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it passes ``limit`` bytes (the rest unread)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client left: the app sees an empty body
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "code": status}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["MAX_BODY_BYTES", "MAX_GRAMMAR_CHARS", "MAX_GRAMMAR_DEPTH", "InFlight",
           "RequestGuard", "grammar_depth", "grammar_problem"]
