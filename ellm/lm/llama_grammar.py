"""Grammars on the packaged server (llama-cpp-python): refused when they do not parse, and
applied to the likeliest tokens first.

llama-cpp-python checks a request's grammar against every token of the vocabulary at every
step; Gemma-3's vocabulary has 262,144 tokens, which made a constrained answer several times
slower than a free one on a CPU. :class:`LikeliestFirst` takes the grammar's place in the
sampler chain and checks the :data:`LIKELIEST` likeliest tokens first, the whole vocabulary only
when none of them fits (as llama.cpp's own server checks the sampled token first). Greedy
decoding picks the same token as the full check (the likeliest valid token is among them
whenever any valid one is); sampling draws from the valid tokens among them.
"""

from __future__ import annotations

import ctypes
from typing import Any, Final

import numpy as np

LIKELIEST: Final = 512


class LikeliestFirst:
    """A llama.cpp sampler applying ``grammar`` (GBNF, rule ``root``) to the likeliest tokens
    first (module docstring); it advances the grammar with each accepted token."""

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
        if not valid.any():  # none of them fits: the whole vocabulary
            self._llama.llama_sampler_apply(self.grammar, cur_p)
            return
        keep = likeliest[valid]
        kept = logits[keep].copy()
        logits[:] = -np.inf
        logits[keep] = kept

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
    """Make the server answer HTTP 400 to a request whose ``grammar`` (or JSON schema, which
    it turns into one) llama.cpp cannot parse. llama-cpp-python hands such a grammar's null
    sampler to llama.cpp, whose process then dies with SIGSEGV, taking every other request
    with it; parsed here first, with ``llama``'s vocabulary, a bad grammar is refused alone, in
    words a client recognises (docs/lm.md, "Answers that are always valid")."""
    import llama_cpp
    from fastapi import HTTPException

    original = llama_cpp.LlamaGrammar.from_string.__func__
    vocab = llama._model.vocab

    def from_string(cls: type, grammar: str, verbose: bool = True) -> Any:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise HTTPException(status_code=400, detail="grammar: llama.cpp cannot parse it "
                                "(GBNF, rule 'root'); see the server's output for where")
        llama_cpp.llama_sampler_free(sampler)
        return original(cls, grammar, verbose)

    llama_cpp.LlamaGrammar.from_string = classmethod(from_string)
