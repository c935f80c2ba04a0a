"""How the packaged server loads a GGUF model into llama.cpp (llama-cpp-python).

Extra buffer types are off by default. With them on, llama.cpp repacks the weights at load time
into CPU-specific layouts (the AMX and "repack" buffer types). On CPUs with AMX, llama.cpp
0.3.x builds crash (SIGSEGV in libggml-cpu) on the first completion of a repacked model, and a
build option cannot reach users who type ``pip install -e '.[llm]'``. Loading without them works
on every CPU; what it costs where both run is measured by ``python -m ellm_tools.llama --speed``
(docs/lm.md).

llama-cpp-python's ``Llama`` takes no ``use_extra_bufts`` argument: it starts from
``llama_model_default_params()``, so :func:`extra_buffer_types` sets the flag on those defaults.

    python -m ellm_tools.llama --speed [--model gemma3-270m|PATH] [--tokens 64]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

SPEED_PROMPT: Final = ("You are playing a game of survival and crafting. You see a tree, grass, "
                       "water and a cow. You have nothing in your inventory. Good things to do "
                       "next are:\n-")


@contextlib.contextmanager
def extra_buffer_types(enabled: bool) -> Iterator[None]:
    """Models loaded inside this block use llama.cpp's extra buffer types iff ``enabled``."""
    import llama_cpp.llama_cpp as low

    original = low.llama_model_default_params

    def defaults() -> Any:
        params = original()
        params.use_extra_bufts = enabled
        return params

    low.llama_model_default_params = defaults
    try:
        yield
    finally:
        low.llama_model_default_params = original


def startup_check(llama: Any) -> str:
    """One short completion, so a model that cannot compute fails before the server listens."""
    answer = llama.create_completion("You see a tree. Next:", max_tokens=2, temperature=0)
    return str(answer["choices"][0]["text"])


def measure(path: str, *, extra_bufts: bool, tokens: int, n_threads: int | None) -> dict[str, float]:
    """Prompt and generation tokens/s of one fresh model (llama.cpp's own timings)."""
    from llama_cpp import Llama

    kwargs: dict[str, Any] = {"n_ctx": 512, "verbose": False, "seed": 0}
    if n_threads:
        kwargs["n_threads"] = n_threads
    with extra_buffer_types(extra_bufts):
        llama = Llama(model_path=path, **kwargs)
    assert llama.model_params.use_extra_bufts == extra_bufts
    llama.create_completion(SPEED_PROMPT, max_tokens=4, temperature=0)  # warm-up
    runs = []
    for _ in range(3):
        llama.reset()
        start = time.perf_counter()
        out = llama.create_completion(SPEED_PROMPT, max_tokens=tokens, temperature=0)
        runs.append((time.perf_counter() - start, out["usage"]))
    seconds, usage = min(runs, key=lambda run: run[0])
    return {"seconds": seconds, "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "tokens_per_s": (usage["prompt_tokens"] + usage["completion_tokens"]) / seconds,
            "completion_tokens_per_s": usage["completion_tokens"] / seconds}


def speed(model: str, tokens: int, n_threads: int | None) -> int:
    """With and without extra buffer types, each in a fresh process, so a crash hides nothing."""
    from ellm.actors.watch import signal_name
    from ellm_tools.packaged_models import locate_model

    path = str(locate_model(model).path)
    results: dict[str, dict[str, float] | str] = {}
    for extra in (False, True):
        code = ("import json, sys; from ellm_tools.llama import measure; print(json.dumps(measure("
                f"{path!r}, extra_bufts={extra}, tokens={tokens}, n_threads={n_threads})))")
        done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                              text=True)
        name = "extra buffer types on" if extra else "extra buffer types off (default)"
        if done.returncode == 0:
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            why = signal_name(-done.returncode) if done.returncode < 0 else done.stderr[-300:]
            results[name] = f"failed: {why}"
    for name, result in results.items():
        if isinstance(result, str):
            print(f"{name}: {result}")
        else:
            print(f"{name}: {result['tokens_per_s']:.1f} tokens/s "
                  f"({result['prompt_tokens']:.0f} prompt + {result['completion_tokens']:.0f} "
                  f"completion tokens in {result['seconds']:.3f} s; "
                  f"completion {result['completion_tokens_per_s']:.1f} tokens/s)")
    off, on = results.values()
    if isinstance(off, dict) and isinstance(on, dict):
        print(f"without extra buffer types: {on['seconds'] / off['seconds']:.2f}x the speed "
              "with them")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.llama", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speed", action="store_true", required=True,
                        help="tokens/s with and without llama.cpp's extra buffer types")
    parser.add_argument("--model", default="gemma3-270m", help="packaged name or .gguf path")
    parser.add_argument("--tokens", type=int, default=64, help="completion tokens per run")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads")
    args = parser.parse_args(argv)
    return speed(args.model, args.tokens, args.threads)


if __name__ == "__main__":
    sys.exit(main())
