"""Crafter's goal suggester by ``lm_class`` (docs/lm.md), also the Craftax engine's."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ellm.games.crafter.oracle import SimpleOracle
from ellm.games.crafter.prompts import load_prompt
from ellm.lm.base import GoalSuggester
from ellm.lm.config import LMSpec
from ellm.lm.connect import build_client, spec_with
from ellm.lm.gpt import GPTLanguageModel
from ellm.lm.nonblocking import NonBlockingLanguageModel
from ellm.lm.novelty import NoveltySuggester
from lmclient.client import log_once


def build_suggester(lm_spec: LMSpec | Mapping[str, Any], *, all_goals: Sequence[str],
                    cache_dir: str | Path | None = None, base_url: str | None = None,
                    sleep: Callable[[float], None] = time.sleep,
                    paper_setting: bool = True,
                    synonyms: Mapping[str, str] | None = None,
                    goal_vocabulary: Sequence[str] | None = None) -> GoalSuggester:
    """The goal suggester ``lm_spec.lm_class`` names; ValueError on any invalid raw key."""
    spec = spec_with(lm_spec, cache_dir, base_url)
    common = {"novelty_bonus": spec.novelty_bonus, "max_num_goals": spec.max_num_goals,
              "synonyms": synonyms}
    if spec.lm_class == "SimpleOracle":
        return SimpleOracle(paper_setting=paper_setting, **common)
    if spec.lm_class == "Novelty":
        return NoveltySuggester(all_goals, **common)
    prompt = load_prompt(spec.prompt, spec.prompt_file)
    client = build_client(lm_spec, cache_dir=cache_dir, base_url=base_url, sleep=sleep)
    common["goal_vocabulary"] = goal_vocabulary
    if spec.blocking or client.offline:
        return GPTLanguageModel(client, prompt, **common)
    log_once(logging.INFO, "non-blocking LM: cache misses are asked in the background (at "
             "most %d in flight per suggester); meanwhile a step gets the episode's last "
             "answered goals (lm/fallback_steps)", spec.max_in_flight)
    return NonBlockingLanguageModel(client, prompt, max_in_flight=spec.max_in_flight, **common)
