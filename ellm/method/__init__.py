"""Every method a run can train, for both engines: this registry, and beside it each method's
config (``method=<name>``, ``<name>.yaml``). The original's spellings name them too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from omegaconf import DictConfig, OmegaConf

from ellm.errors import ConfigError
from ellm.lm.config import NOVELTY_CLASSES
from ellm.reward import StepReward

DEFAULT_METHOD: Final = "ellm"


def no_rewards(spec: Any) -> Sequence[StepReward]:
    return ()


@dataclass(frozen=True)
class CraftaxParts:
    goal_source: str | None  # "lm" (the oracle or an LLM, by lm_class) or "novelty"
    bonus: str | None
    extrinsic_weight: float  # of Craftax's reward unless craftax.extrinsic_weight is set


@dataclass(frozen=True)
class Method:
    """What the training loops do for a method (``torch``/``craftax``: the engines that train it)."""

    name: str
    goal_reward: bool
    game_reward: bool  # always, not only with use_extr_rew=True
    learns: bool = True
    # Per-step rewards, new for each rollout (module-level: actors receive the Method pickled).
    rewards: Callable[[Any], Sequence[StepReward]] = no_rewards
    torch: bool = True
    craftax: CraftaxParts | None = None

    def game_weight(self, use_extr_rew: bool, agent: Any) -> float | None:
        """The weight of the game reward among the per-step rewards; None when not used."""
        if self.game_reward:
            return 1.0
        if not use_extr_rew:
            return None
        # The exploration baselines weigh it (agent.extr_rew_weight); ELLM adds it as it is.
        return float(getattr(agent, "extr_rew_weight", 1.0))


METHODS: Final = {
    "ellm": Method("ellm", goal_reward=True, game_reward=False,
                   craftax=CraftaxParts("lm", None, 0.0)),
    "ellm-pixels": Method("ellm-pixels", goal_reward=True, game_reward=False),
    "novelty": Method("novelty", goal_reward=True, game_reward=False,
                      craftax=CraftaxParts("novelty", None, 0.0)),
    "rnd": Method("rnd", goal_reward=False, game_reward=False,
                  craftax=CraftaxParts(None, "rnd", 0.0)),
    "noveld": Method("noveld", goal_reward=False, game_reward=False,
                     craftax=CraftaxParts(None, "noveld", 0.0)),
    "apt": Method("apt", goal_reward=False, game_reward=False),
    "e3b": Method("e3b", goal_reward=False, game_reward=False, torch=False,
                  craftax=CraftaxParts(None, "e3b", 0.0)),
    "extrinsic": Method("extrinsic", goal_reward=False, game_reward=True,
                        craftax=CraftaxParts(None, None, 1.0)),
    "zero": Method("zero", goal_reward=False, game_reward=False, torch=False,
                   craftax=CraftaxParts(None, None, 0.0)),
    "random": Method("random", goal_reward=False, game_reward=True, learns=False,
                     craftax=CraftaxParts(None, None, 0.0)),
}
TORCH_METHODS: Final = tuple(name for name, m in METHODS.items() if m.torch)
CRAFTAX_METHODS: Final = tuple(name for name, m in METHODS.items() if m.craftax)

_RND_CLASSES: Final = ("baselines.rnd.RNDAgent",)
_APT_CLASSES: Final = ("baselines.icm_apt.ICMAPTAgent",)
_ELLM: Final = {True: "ellm", False: "ellm-pixels"}  # by whether its agent sees any text


def _rnd_or_noveld(cfg: DictConfig) -> str | None:
    if cfg.agent._target_ in _RND_CLASSES:
        return "noveld" if OmegaConf.select(cfg, "agent.noveld") else "rnd"
    return None


# The original's spellings, read in order: agent class, env, LM class.
SPELLINGS: Final[tuple[tuple[str, Callable[[DictConfig, Any], str | None]], ...]] = (
    ("agent._target_", lambda cfg, game: _rnd_or_noveld(cfg)),
    ("agent._target_", lambda cfg, game: "apt" if cfg.agent._target_ in _APT_CLASSES else None),
    ("env_spec.name",
     lambda cfg, game: "extrinsic" if game.extrinsic(cfg.env_spec.name) else None),
    ("env_spec.lm_spec.lm_class",
     lambda cfg, game: "novelty" if cfg.env_spec.lm_spec.lm_class in NOVELTY_CLASSES else None),
)


ALIAS_METHODS: Final = ("rnd", "noveld", "apt")  # agent=<name> is method=<name>


def check_agent_alias(overrides: Sequence[str]) -> None:
    """Refuse an agent alias beside a method that differs: Hydra would drop one silently."""
    chosen = dict(o.partition("=")[::2] for o in overrides if "=" in o)
    agent, method = chosen.get("agent"), chosen.get("method")
    if agent is None or method is None or agent == method:
        return
    if agent in ALIAS_METHODS or (agent == "dqn" and method in ALIAS_METHODS):
        raise ConfigError(f"agent={agent} contradicts method={method}: agent=rnd, noveld and "
                          "apt are aliases of method=rnd, noveld and apt, each with its own "
                          "agent; drop one of them")


def resolve_method(cfg: DictConfig, game: Any) -> Method:
    """The method ``cfg`` trains (see the module docstring)."""
    chosen = OmegaConf.select(cfg, "method", default=DEFAULT_METHOD)
    if chosen not in METHODS:
        raise ConfigError(f"method={chosen!r} is invalid: expected one of {sorted(METHODS)}")
    if not METHODS[chosen].torch:
        raise ConfigError(f"method={chosen} runs on the Craftax engine only "
                          "(env_spec.name=Craftax-Classic-v1 or -v2)")
    if chosen in _ELLM.values():
        chosen = _ELLM[bool(cfg.get("use_goal")) or bool(cfg.get("use_language_state"))]
    spelled = next(((key, name) for key, read in SPELLINGS if (name := read(cfg, game))), None)
    if spelled is None or spelled[1] == chosen:
        return METHODS[chosen]
    key, name = spelled
    # NovelD is RND's agent with agent.noveld=True: agent=rnd agent.noveld=True is NovelD.
    if chosen in _ELLM.values() or (chosen, name) == ("rnd", "noveld"):
        return METHODS[name]
    raise ConfigError(f"method={chosen} contradicts {key}={OmegaConf.select(cfg, key)!r}, "
                      f"which is the spelling of method={name}: drop one of them")


__all__ = ["ALIAS_METHODS", "CRAFTAX_METHODS", "DEFAULT_METHOD", "METHODS", "SPELLINGS",
           "TORCH_METHODS", "CraftaxParts", "Method", "check_agent_alias", "resolve_method"]
