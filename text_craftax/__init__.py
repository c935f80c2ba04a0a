"""Text-Craftax: Craftax-Classic (PyPI ``craftax``, Crafter in JAX) with Text-Crafter's captions
computed inside JAX. A game: it knows nothing of language models or RL (docs/craftax.md)."""

from __future__ import annotations

import contextlib
import io

# craftax prints a line about its texture cache when first imported: keep the CLI's output ours.
with contextlib.redirect_stdout(io.StringIO()):
    import craftax.craftax_classic.constants  # noqa: F401

from text_craftax.captions import Caption, caption, describe, phrase_text, transition_phrase
from text_craftax.env import ENV_IDS, CraftaxEnv, make
from text_craftax.vocab import ITEMS, NAMES, NO_PHRASE, NUM_ACTIONS, PHRASES

__all__ = ["ENV_IDS", "ITEMS", "NAMES", "NO_PHRASE", "NUM_ACTIONS", "PHRASES", "Caption",
           "CraftaxEnv", "caption", "describe", "make", "phrase_text", "transition_phrase"]
