"""What the Craftax engine uses of Text-Craftax: the environment, captions and records."""

from __future__ import annotations

from text_craftax import ITEMS, NAMES, NO_PHRASE, PHRASES, Caption, CraftaxEnv, describe, make
from text_craftax.env import ACHIEVEMENTS, ENV_IDS
from text_crafter import crafter_score, success_rates
from text_crafter.actions import GOOD_ACTIONS, HARDER_ACTIONS, SYNONYMS
from text_game.stats import StatsWriter

__all__ = ["ACHIEVEMENTS", "ENV_IDS", "GOOD_ACTIONS", "HARDER_ACTIONS", "ITEMS", "NAMES",
           "NO_PHRASE", "PHRASES", "SYNONYMS", "Caption", "CraftaxEnv", "StatsWriter",
           "crafter_score", "describe", "make", "success_rates"]
