"""A scriptable OpenAI-compatible HTTP server on 127.0.0.1 for tests (stdlib only).

Speaks ``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models``. Each
request takes the next :class:`Reply` from the script (``push``), else the server's
``responder(request_body)``, else ``default``. Every POST is recorded. ``GET /v1/models`` lists
``models`` (None: answers 404, as servers without that route do), each owned by ``owned_by``
(vLLM says "vllm", llama-cpp-python "me"); ``GET /version`` answers ``version`` (None: 404).
Runs in a daemon thread; ``stop()`` shuts it down and closes the socket.
"""

from __future__ import annotations

import json
import math
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: text (None = JSON null content), HTTP status, delay, logprobs, token
    counts (``completion_tokens`` None: 10, or the request's ``max_tokens`` if fewer). Fields
    are sent as given, so a test can script a lying server (a number as text, NaN counts, a
    string logprob); ``usage`` replaces the whole usage object; ``raw``: send these bytes as the
    whole body instead (a server answering garbage); ``hang_up``: close the connection without
    answering (a server that crashed mid-request); ``message``: an error's message (default
    "scripted HTTP <status>"); ``trickle`` and ``endless``: a hostile server's body, sent one
    byte at a time or never ending."""

    text: Any = "- chop tree\n- drink water"
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    top_logprobs: dict[str, Any] | None = None
    prompt_tokens: Any = 100
    completion_tokens: Any = None
    raw: bytes | None = None
    usage: Any = "counts"
    hang_up: bool = False
    message: str | None = None
    trickle: float = 0.0  # seconds between the body's bytes (a server that trickles)
    endless: bool = False  # after the answer, padding without end (chunked, never finished)

    @classmethod
    def bullets(cls, *goals: str, **kw: Any) -> Reply:
        return cls("".join(f"- {g}\n" for g in goals), **kw)

    @classmethod
    def error(cls, status: int = 500, **kw: Any) -> Reply:
        return cls(None, status=status, **kw)

    @classmethod
    def garbage(cls, body: bytes = b"<html>502 Bad Gateway</html>", **kw: Any) -> Reply:
        return cls(None, raw=body, **kw)

    @classmethod
    def hung_up(cls) -> Reply:
        return cls(None, hang_up=True)

    @classmethod
    def rate_limited(cls, retry_after: float = 0.01) -> Reply:
        return cls(None, status=429, headers={"retry-after": str(retry_after)})

    @classmethod
    def yes_no(cls, yes: float | None, no: float | None, token: str = " Yes") -> Reply:
        top = {"Maybe": -5.0}
        if yes is not None:
            top[token] = yes
        if no is not None:
            top[token.replace("Yes", "No")] = no
        return cls(token, top_logprobs=top, completion_tokens=1)


@dataclass
class Request:
    path: str
    body: dict[str, Any]
    authorization: str | None


class OpenAITestServer:
    """Start with ``start()`` (or as a context manager); ``base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.default = Reply()
        self.models: list[str] | None = ["test-model"]
        self.owned_by = "test"
        self.version: str | None = None
        self.requests: list[Request] = []
        self.sent = 0  # body bytes sent by hostile replies (trickle, endless)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- life cycle -----------------------------------------------------------------------
    def start(self) -> OpenAITestServer:
        handler = type("Handler", (_Handler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True, name="openai-test-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAITestServer:  # noqa: PYI034 - Self needs Python 3.11
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def is_listening(self) -> bool:
        """True when something accepts TCP connections on the server's port."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    # ---- scripting ------------------------------------------------------------------------
    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self.script:
                return self.script.popleft()
        return self.responder(body) if self.responder else self.default

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)


class _Handler(BaseHTTPRequestHandler):
    owner: OpenAITestServer

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        models, version = self.owner.models, self.owner.version
        if self.path.rstrip("/") == "/v1/models" and models is not None:
            self._send(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": self.owner.owned_by}
                for name in models]})
        elif self.path.rstrip("/") == "/version" and version is not None:
            self._send(200, {"version": version})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        owner = self.owner
        owner._record(Request(self.path, body, self.headers.get("authorization")))
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        reply = owner._next_reply(body)
        if reply.delay and owner._stopping.wait(reply.delay):
            return
        if reply.hang_up:
            self.close_connection = True  # nothing written: the client reads a closed socket
            return
        if reply.raw is not None:
            self._send_bytes(reply.status, reply.raw, "text/html")
            return
        if reply.status != 200:
            error = {"message": reply.message or f"scripted HTTP {reply.status}",
                     "type": "server_error", "code": None}
            self._send(reply.status, {"error": error}, reply.headers)
            return
        chat = self.path == "/v1/chat/completions"
        data = json.dumps(_completion(body, reply, chat)).encode()
        if reply.trickle or reply.endless:
            self._send_hostile(data, reply)
            return
        self._send(200, _completion(body, reply, chat), reply.headers)

    def _send_hostile(self, data: bytes, reply: Reply) -> None:
        """Chunked: the answer one byte per ``trickle`` seconds, then with ``endless`` 64 KiB
        chunks of spaces until the client hangs up; bytes sent go to ``owner.sent``."""
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            pieces = [data[i:i + 1] for i in range(len(data))] if reply.trickle else [data]
            for piece in pieces:
                self._chunk(piece)
                if self.owner._stopping.wait(reply.trickle):
                    return
            while reply.endless and not self.owner._stopping.is_set():
                self._chunk(b" " * 65536)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should

    def _chunk(self, piece: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.flush()
        with self.owner._lock:
            self.owner.sent += len(piece)

    def _send(self, status: int, payload: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_bytes(self, status: int, data: bytes, content_type: str,
                    headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)


def _usage(body: dict[str, Any], reply: Reply) -> Any:
    if reply.usage != "counts":
        return reply.usage
    completion = reply.completion_tokens
    if completion is None:
        completion = min(10, body.get("max_tokens") or 10)
    total = None
    if all(type(n) is int for n in (reply.prompt_tokens, completion)):
        total = reply.prompt_tokens + completion
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": completion,
            "total_tokens": total}


def _likeliest(top: dict[str, Any]) -> str:
    """The token of the highest logprob (a scripted lie that is not a number ranks last)."""
    return max(top, key=lambda t: top[t] if type(top[t]) in (int, float) else -math.inf)


def _completion(body: dict[str, Any], reply: Reply, chat: bool) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
    top = reply.top_logprobs
    if chat:
        choice["message"] = {"role": "assistant", "content": reply.text}
        if top is not None and body.get("logprobs"):
            entries = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top.items()]
            best = _likeliest(top)
            choice["logprobs"] = {"content": [{"token": best, "logprob": top[best],
                                               "bytes": None, "top_logprobs": entries}],
                                  "refusal": None}
    else:
        choice["text"] = "" if reply.text is None else reply.text
        if top is not None and body.get("logprobs"):
            best = _likeliest(top)
            choice["logprobs"] = {"tokens": [best], "token_logprobs": [top[best]],
                                  "top_logprobs": [top], "text_offset": [0]}
    return {"id": "test-1", "object": "chat.completion" if chat else "text_completion",
            "created": 0, "model": body.get("model", "test-model"), "choices": [choice],
            "usage": _usage(body, reply)}
