"""The language-feedback env as ``gym.make`` hands it out: inside LLF-Bench's wrapper class where
LLF-Bench is installed (:mod:`text_game.llf_bench`), as it is elsewhere. Each game's gymnasium
entry point passes its env through :func:`as_registered`."""

from __future__ import annotations

import gymnasium as gym

from text_game.llf import LanguageFeedbackEnv


def as_registered(env: LanguageFeedbackEnv) -> gym.Env:
    """``env`` as ``gym.make`` returns it: inside LLF-Bench's wrapper class where LLF-Bench is
    installed (:mod:`text_game.llf_bench`), as it is elsewhere."""
    try:
        from text_game.llf_bench import LLFBenchWrapper
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("llfbench"):
            raise  # LLF-Bench is there but broken: say so rather than hide it
        return env  # no LLF-Bench here, so no tool of its looks for its class
    return LLFBenchWrapper(env)
