"""Text-Crafter: the Crafter game (PyPI ``crafter``) with text captions, as ELLM uses it.

``make("CrafterTextEnv-v1")`` builds the paper's setting; see :mod:`text_crafter.env`.
The ids are also registered with gymnasium (``gymnasium.make("CrafterTextEnv-v1")``), as is the
language-feedback environment ``llf-crafter-v0`` (:mod:`text_crafter.llf`, docs/llf.md).
"""

import gymnasium as _gym

from text_crafter.actions import (
    ACTION_SPACES,
    EASIER_ACTIONS,
    GOOD_ACTIONS,
    SYNONYMS,
    action_names,
    reported_names,
    same_action,
)
from text_crafter.env import ENV_SPECS, CrafterTextEnv, make
from text_crafter.stats import (
    ACHIEVEMENTS,
    StatsWriter,
    achievements_unlocked,
    crafter_score,
    load_stats,
    success_rates,
)

LLF_ENV_ID = "llf-crafter-v0"  # the language-feedback environment (text_crafter.llf)

for _env_id, _spec in ENV_SPECS.items():
    if _env_id not in _gym.registry:
        _gym.register(
            id=_env_id, entry_point="text_crafter.env:CrafterTextEnv",
            kwargs={"version": _spec.version, "extrinsic": _spec.extrinsic,
                    "reward": _spec.reward})

if LLF_ENV_ID not in _gym.registry:
    # Text actions and None fields are the LLF contract, not gymnasium's checks'; the contract
    # raises its own error for a step before reset.
    _gym.register(id=LLF_ENV_ID, entry_point="text_crafter.llf:CrafterLLFEnv",
                  disable_env_checker=True, order_enforce=False)

__all__ = [
    "ACHIEVEMENTS", "ACTION_SPACES", "EASIER_ACTIONS", "ENV_SPECS", "GOOD_ACTIONS", "LLF_ENV_ID",
    "SYNONYMS", "CrafterTextEnv", "StatsWriter", "achievements_unlocked", "action_names",
    "crafter_score", "load_stats", "make", "reported_names", "same_action", "success_rates",
]
