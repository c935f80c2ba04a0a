"""Grammars on the packaged server (llama-cpp-python): refused when they do not parse, and
applied to the likeliest tokens first, since checking Gemma-3's 262,144 tokens at every step made
a constrained answer several times slower than a free one (docs/lm.md).

    python -m ellm_tools.llama_grammar [--model gemma3-270m|PATH] [--tokens 40] [--threads N]
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

LIKELIEST: Final = 512


class LikeliestFirst:
    """A llama.cpp sampler applying ``grammar`` to the likeliest tokens first, the whole
    vocabulary only when none fits: greedy decoding picks what the full check would."""

    def __init__(self, vocab: Any, grammar: str, root: str = "root") -> None:
        import llama_cpp

        self._llama = llama_cpp
        self.grammar = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"),
                                                            root.encode("utf-8"))
        if not self.grammar:
            raise ValueError("grammar: llama.cpp cannot parse it (GBNF)")
        iface = llama_cpp.llama_sampler_i()
        # The callbacks must live as long as the sampler: kept on self.
        self._callbacks = (llama_cpp.llama_sampler_i_accept(self._accept),
                           llama_cpp.llama_sampler_i_apply(self._apply),
                           llama_cpp.llama_sampler_i_reset(self._reset))
        iface.accept, iface.apply, iface.reset = self._callbacks
        self._iface = iface
        self.sampler = llama_cpp.llama_sampler()
        self.sampler.iface = ctypes.pointer(iface)
        self.sampler.ctx = None

    def pointer(self) -> Any:
        return ctypes.pointer(self.sampler)

    def _accept(self, _sampler: Any, token: int) -> None:
        self._llama.llama_sampler_accept(self.grammar, token)

    def _reset(self, _sampler: Any) -> None:
        self._llama.llama_sampler_reset(self.grammar)

    def _apply(self, _sampler: Any, cur_p: Any) -> None:
        # An exception must not escape into llama.cpp: an unchecked token would then reach the
        # grammar, which aborts the process. The whole-vocabulary check is always right.
        try:
            if self._likeliest(cur_p):
                return
        except Exception:  # noqa: BLE001, S110 - any failure: the whole check below
            pass
        self._llama.llama_sampler_apply(self.grammar, cur_p)

    def _likeliest(self, cur_p: Any) -> bool:
        """Keep the valid tokens among the likeliest; False (nothing changed) when none is."""
        candidates = cur_p.contents
        n = int(candidates.size)
        tokens = np.ctypeslib.as_array(candidates.data, shape=(n,))
        logits = tokens["logit"]
        k = min(LIKELIEST, n)
        likeliest = np.argpartition(logits, n - k)[n - k:]
        few = (self._llama.llama_token_data * k)()
        few_tokens = np.ctypeslib.as_array(few)
        few_tokens[:] = tokens[likeliest]
        few_p = self._llama.llama_token_data_array(few, k, -1, False)
        self._llama.llama_sampler_apply(self.grammar, ctypes.byref(few_p))
        valid = np.isfinite(few_tokens["logit"])
        if not valid.any():
            return False
        keep = likeliest[valid]
        kept = logits[keep].copy()
        logits[:] = -np.inf
        logits[keep] = kept
        return True

    def __del__(self) -> None:
        if getattr(self, "grammar", None):
            self._llama.llama_sampler_free(self.grammar)
            self.grammar = None


def likeliest_first() -> None:
    """Make llama-cpp-python's samplers apply grammars with :class:`LikeliestFirst`."""
    import llama_cpp
    from llama_cpp import _internals

    def add_grammar(self: Any, model: Any, grammar: Any) -> None:
        sampler = LikeliestFirst(model.vocab, grammar._grammar, grammar._root)
        llama_cpp.llama_sampler_chain_add(self.sampler, sampler.pointer())
        # Listed as custom, so the chain lets go of it before it is freed.
        self.custom_samplers.append((llama_cpp.llama_sampler_chain_n(self.sampler) - 1,
                                     sampler))

    _internals.LlamaSampler.add_grammar = add_grammar


def refuse_bad_grammars(llama: Any) -> None:
    """Make the server answer HTTP 400 to a grammar llama.cpp cannot parse, whose null sampler
    would otherwise kill the model process with SIGSEGV, and every request with it."""
    import llama_cpp
    from fastapi import HTTPException

    from ellm_tools.serve_guard import grammar_problem

    original = llama_cpp.LlamaGrammar.from_string.__func__
    vocab = llama._model.vocab

    def from_string(cls: type, grammar: str, verbose: bool = True) -> Any:
        problem = grammar_problem(grammar)  # llama.cpp's parser would overflow its stack
        if problem is not None:
            raise HTTPException(status_code=400, detail=problem)
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise HTTPException(status_code=400, detail="grammar: llama.cpp cannot parse it "
                                "(GBNF, rule 'root'); see the server's output for where")
        llama_cpp.llama_sampler_free(sampler)
        return original(cls, grammar, verbose)

    llama_cpp.LlamaGrammar.from_string = classmethod(from_string)


def speed(model: str, tokens: int, n_threads: int | None) -> dict[str, float]:
    """Seconds per answer token, free and constrained (whole vocabulary, likeliest first)."""
    from llama_cpp import Llama, LlamaGrammar, _internals

    from ellm_tools.packaged_models import locate_model
    from lmclient.constraints import GoalList
    from text_crafter import GOOD_ACTIONS

    vocabulary = tuple(a for a in GOOD_ACTIONS if not a.startswith(("move", "do nothing")))
    grammar = GoalList("goals", vocabulary=vocabulary, max_items=8).grammar()
    kwargs: dict[str, Any] = {"n_ctx": 512, "verbose": False, "seed": 0}
    if n_threads:
        kwargs["n_threads"] = n_threads
    llama = Llama(model_path=str(locate_model(model).path), **kwargs)
    whole = _internals.LlamaSampler.add_grammar
    likeliest_first()
    adders = {"free": None, "whole vocabulary": whole,
              "likeliest first": _internals.LlamaSampler.add_grammar}
    prompt = "You see cow, grass, tree, and water. You have wood. What do you do?\n"
    best = dict.fromkeys(adders, float("inf"))
    for _ in range(3):
        for name, adder in adders.items():
            extra: dict[str, Any] = {}
            if adder is not None:
                _internals.LlamaSampler.add_grammar = adder
                extra["grammar"] = LlamaGrammar.from_string(grammar)
            llama.reset()
            start = time.perf_counter()
            out = llama.create_completion(prompt, max_tokens=tokens, temperature=0, **extra)
            per_token = (time.perf_counter() - start) / max(1, out["usage"]["completion_tokens"])
            best[name] = min(best[name], per_token)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ellm_tools.llama_grammar",
                                     description="Seconds per answer token, free and with a "
                                                 "grammar checked two ways (module docstring).")
    parser.add_argument("--model", default="gemma3-270m", help="packaged name or .gguf path")
    parser.add_argument("--tokens", type=int, default=40, help="answer tokens at most")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads")
    args = parser.parse_args(argv)
    for name, seconds in speed(args.model, args.tokens, args.threads).items():
        print(f"{name}: {1000 * seconds:.1f} ms per answer token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
