"""The LM client a run's ``env_spec.lm_spec`` builds: its endpoint, its key and its answer cache."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ellm.lm.config import LMSpec, describe_key, parse_lm_spec, resolve_api_key
from lmclient.cache import AnswerCache
from lmclient.client import LMClient, log_once
from lmclient.spec import api_url, default_cache_dir, endpoint_of

log = logging.getLogger("ellm.lm")


def spec_with(lm_spec: LMSpec | Mapping[str, Any], cache_dir: str | Path | None,
              base_url: str | None) -> LMSpec:
    """``lm_spec`` parsed, its endpoint resolved, with the cache directory and endpoint given."""
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
    """The client of ``lm_spec``, parsed or raw; the key comes from the environment, or from a
    raw mapping's deprecated ``openai_key``."""
    spec = spec_with(lm_spec, cache_dir, base_url)
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
