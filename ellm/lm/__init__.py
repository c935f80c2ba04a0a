"""Goal suggestion (ELLM.md §3): the LM spec, its client (:mod:`lmclient`) and the suggesters;
Crafter's oracle, prompt, state and suggester stay importable from here (docs/lm.md)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ellm.lm.base import GoalSuggester
from ellm.lm.config import DEFAULT_MODEL, LM_CLASSES, LMSpec, parse_lm_spec, redact_lm_spec
from ellm.lm.connect import build_client, check_cache
from ellm.lm.gpt import GPTLanguageModel
from ellm.lm.nonblocking import NonBlockingLanguageModel
from ellm.lm.novelty import BaselineModel, NoveltySuggester
from lmclient.cache import AnswerCache, CacheError
from lmclient.client import LMClient, LMConfigError
from lmclient.counters import LMCounters

if TYPE_CHECKING:
    from ellm.games.crafter.oracle import ORACLE_GOALS, SimpleOracle
    from ellm.games.crafter.state import TextState
    from ellm.games.crafter.suggesters import build_suggester

__all__ = [
    "DEFAULT_MODEL",
    "LM_CLASSES",
    "ORACLE_GOALS",
    "AnswerCache",
    "BaselineModel",
    "CacheError",
    "GPTLanguageModel",
    "GoalSuggester",
    "LMClient",
    "LMConfigError",
    "LMCounters",
    "LMSpec",
    "NonBlockingLanguageModel",
    "NoveltySuggester",
    "SimpleOracle",
    "TextState",
    "build_client",
    "build_suggester",
    "check_cache",
    "parse_lm_spec",
    "redact_lm_spec",
]

# Crafter's names, loaded when first asked for: importing ellm.lm loads no game.
_CRAFTER = {"ORACLE_GOALS": "oracle", "SimpleOracle": "oracle", "TextState": "state",
            "build_suggester": "suggesters"}


def __getattr__(name: str) -> Any:
    if name in _CRAFTER:
        return getattr(importlib.import_module(f"ellm.games.crafter.{_CRAFTER[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
