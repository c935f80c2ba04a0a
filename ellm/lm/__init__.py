"""Goal suggestion (ELLM.md §3): build a suggester from ``env_spec.lm_spec``."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ellm.lm.base import GoalSuggester, TextState
from ellm.lm.config import (
    DEFAULT_MODEL,
    LM_CLASSES,
    LMSpec,
    describe_key,
    parse_lm_spec,
    redact_lm_spec,
    resolve_api_key,
)
from ellm.lm.gpt import GPTLanguageModel
from ellm.lm.nonblocking import NonBlockingLanguageModel
from ellm.lm.oracle import ORACLE_GOALS, BaselineModel, SimpleOracle
from ellm.lm.prompts import load_prompt
from lmclient.cache import AnswerCache, CacheError
from lmclient.client import LMClient, LMConfigError, log_once
from lmclient.counters import LMCounters
from lmclient.spec import api_url, default_cache_dir, endpoint_of

__all__ = [
    "DEFAULT_MODEL", "LM_CLASSES", "ORACLE_GOALS", "AnswerCache", "BaselineModel", "CacheError",
    "GPTLanguageModel", "GoalSuggester", "LMClient", "LMConfigError", "LMCounters", "LMSpec",
    "NonBlockingLanguageModel", "SimpleOracle", "TextState", "build_client", "build_suggester",
    "check_cache", "parse_lm_spec", "redact_lm_spec",
]

log = logging.getLogger("ellm.lm")


def _spec_with(lm_spec: LMSpec | Mapping[str, Any], cache_dir: str | Path | None,
               base_url: str | None) -> LMSpec:
    spec = lm_spec if isinstance(lm_spec, LMSpec) else parse_lm_spec(lm_spec)
    spec = dataclasses.replace(spec, base_url=endpoint_of(base_url or spec.base_url))
    if cache_dir is not None:
        spec = dataclasses.replace(spec, cache_dir=str(cache_dir))
    return spec


def _cache_of(spec: LMSpec) -> AnswerCache | None:
    """The answer cache of ``spec``, opened (None for dummy answers, which are not cached)."""
    if spec.dummy_lm:
        return None
    return AnswerCache(spec.cache_dir or default_cache_dir()).open()


def check_cache(lm_spec: Mapping[str, Any] | LMSpec) -> None:
    """Open the cache a client of ``lm_spec`` would use: an unusable one stops a run at start."""
    spec = lm_spec if isinstance(lm_spec, LMSpec) else parse_lm_spec(lm_spec)
    cache = _cache_of(spec)
    if cache is not None:
        cache.close()


def build_client(lm_spec: LMSpec | Mapping[str, Any], *, cache_dir: str | Path | None = None,
                 base_url: str | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> LMClient:
    """The cached, budgeted API client of ``lm_spec`` (also Housekeep's yes/no queries): a
    parsed spec (a run's, parsed once) or a raw mapping. The key comes from the environment,
    or from a raw mapping's deprecated ``openai_key``."""
    spec = _spec_with(lm_spec, cache_dir, base_url)
    raw = {} if isinstance(lm_spec, LMSpec) else lm_spec
    if raw.get("openai_key"):
        log.warning("env_spec.lm_spec.openai_key is deprecated: it lands in Hydra's saved "
                    "overrides; export OPENAI_API_KEY instead")
    cache = _cache_of(spec)
    api_key = resolve_api_key(raw, spec)
    if not spec.dummy_lm and not spec.cache_only:
        log_once(logging.INFO, "LM endpoint %s: %s", api_url(spec.base_url),
                 describe_key(spec, api_key))
    return LMClient(spec, api_key=api_key, cache=cache, sleep=sleep)


def build_suggester(lm_spec: LMSpec | Mapping[str, Any], *, all_goals: Sequence[str],
                    cache_dir: str | Path | None = None, base_url: str | None = None,
                    sleep: Callable[[float], None] = time.sleep,
                    paper_setting: bool = True,
                    synonyms: Mapping[str, str] | None = None,
                    goal_vocabulary: Sequence[str] | None = None) -> GoalSuggester:
    """The goal suggester ``lm_spec.lm_class`` names; ValueError on any invalid raw key."""
    spec = _spec_with(lm_spec, cache_dir, base_url)
    common = {"novelty_bonus": spec.novelty_bonus, "max_num_goals": spec.max_num_goals,
              "synonyms": synonyms}
    if spec.lm_class == "SimpleOracle":
        return SimpleOracle(paper_setting=paper_setting, **common)
    if spec.lm_class == "BaselineModel":
        return BaselineModel(all_goals, **common)
    prompt = load_prompt(spec.prompt, spec.prompt_file)
    client = build_client(lm_spec, cache_dir=cache_dir, base_url=base_url, sleep=sleep)
    common["goal_vocabulary"] = goal_vocabulary
    if spec.blocking or client.offline:
        return GPTLanguageModel(client, prompt, **common)
    log_once(logging.INFO, "non-blocking LM: cache misses are asked in the background (at "
             "most %d in flight per suggester); meanwhile a step gets the episode's last "
             "answered goals (lm/fallback_steps)", spec.max_in_flight)
    return NonBlockingLanguageModel(client, prompt, max_in_flight=spec.max_in_flight, **common)
