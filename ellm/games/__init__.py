"""Games the training loop runs on, found once by ``env_spec.name``. The loop never asks which
game it runs: adding one is a module plus a line in GAMES (docs/games.md)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import gymnasium as gym
from omegaconf import DictConfig

from ellm.errors import ConfigError
from ellm.games.craftax import CraftaxGame
from ellm.games.crafter import CrafterGame
from ellm.games.housekeep import HousekeepGame
from ellm.games.report import GameReport
from ellm.goals import Goals
from ellm.lm import LMSpec
from ellm.reward import StepReward

if TYPE_CHECKING:
    from ellm.run.spec import EnvOptions, RunSpec


class Game(Protocol):
    """What the training loop needs from a game (what the report shows is its ``report``)."""

    name: str
    env_ids: tuple[str, ...]
    headline: tuple[str, str]
    report: GameReport
    stats_writer: Callable[..., Any]
    eval_line: tuple[tuple[str, str, str], ...]  # (words, metric, format): the eval log line

    def validate(self, cfg: DictConfig, env: EnvOptions, lm: LMSpec) -> Any:
        """Its own keys parsed (``RunSpec.game_options``); ConfigError naming a bad one."""

    def make_env(self, spec: RunSpec, seed: int) -> gym.Env:
        """An env whose infos carry ``discount``, ``effective_success`` and ``episode_stats``."""

    def extrinsic(self, env_name: str) -> bool:
        """True when ``env_spec.name`` is the spelling of the extrinsic baseline."""

    def paper_setting(self, env_name: str) -> bool:
        """True when the run should behave as the original code did (docs/fidelity.md)."""

    def needs_embedder(self, spec: RunSpec) -> bool:
        """True when its goal reward compares sentences with SBERT."""

    def goals(self, spec: RunSpec, embedder: Any, goal_reward: bool
              ) -> tuple[Goals, list[StepReward]]:
        """A goal source asking ``spec.lm`` and the per-step rewards on it; a new pair for each
        rollout."""

    def novelty_goals(self, spec: RunSpec) -> Sequence[str]:
        """Every goal the Novelty baseline suggests."""

    def episode_metrics(self, stats: Mapping[str, float]) -> dict[str, float]:
        """Game-specific ``train/`` metrics of a finished training episode."""

    def eval_metrics(self, episodes: Sequence[Mapping[str, float]],
                     goals: Sequence[Goals]) -> dict[str, float]:
        """Metrics of an evaluation's episodes (``goals``: training and evaluation sources)."""

    def goal_text(self, spec: RunSpec, goals: Sequence[str]) -> str:
        """The goal string an agent with ``use_goal`` reads."""

    def single_goals(self, spec: RunSpec) -> list[str]:
        """Goals evaluated one at a time with ``single_goal_eval``."""

    def goal_achieved(self, info: Mapping[str, Any], goal: str) -> bool:
        """Did the step of ``info`` achieve ``goal``?"""

    def covered(self, info: Mapping[str, Any]) -> tuple[Hashable, ...]:
        """What of the world the step of ``info`` reached (distinct keys: the ``coverage`` column).
        """

    def describe(self, metrics: Mapping[str, float]) -> str:
        """An evaluation's headline numbers in words, for the end of a run."""


def eval_summary(game: Game, metrics: Mapping[str, float], frame: int) -> str:
    """One line reporting an evaluation, for the log."""
    numbers = (f"{words} " + form.format(metrics.get(key, float("nan")))
               for words, key, form in game.eval_line)
    return f"[eval @ {frame} frames] " + ", ".join(numbers)


@runtime_checkable
class EpisodeCounted(Protocol):
    """An env whose worlds follow (seed, episode number): a resumed run goes on to new worlds."""

    episode_count: int


GAMES: tuple[Game, ...] = (CrafterGame(), HousekeepGame())
# Games of the Craftax engine: the report reads their runs; the torch loop never builds them.
ENGINE_GAMES: tuple[CraftaxGame, ...] = (CraftaxGame(),)


def env_names() -> list[str]:
    return [env_id for game in GAMES for env_id in game.env_ids]


def game_named(name: Any) -> Game | None:
    """The game recorded as ``game`` in a run's config.json, or None for an unknown name."""
    return next((game for game in (*GAMES, *ENGINE_GAMES) if game.name == name), None)


def find_game(env_name: Any) -> Game:
    """The game whose environment ``env_spec.name`` names."""
    for game in GAMES:
        if env_name in game.env_ids:
            return game
    raise ConfigError(f"env_spec.name={env_name!r} is invalid: expected one of {env_names()}")


__all__ = ["GAMES", "EpisodeCounted", "Game", "GameReport", "env_names", "find_game",
           "game_named"]
