"""The Craftax engine's config (``craftax.*``, methods, keys of one engine), checked at start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from omegaconf import DictConfig, OmegaConf

from ellm.craftax.loop import LoopConfig
from ellm.craftax.pqn import PQNConfig
from ellm.errors import ConfigError
from ellm.lm.config import LM_CLASS_ALIASES
from ellm.method import ALIAS_METHODS, CRAFTAX_METHODS, METHODS, TORCH_METHODS
from ellm.run.schema import MAX_WIDTH, integer, is_num, parse, probability, valid
from ellm.run.spec import RunBasics, warn_ignored

ENV_IDS: Final = ("Craftax-Classic-v1", "Craftax-Classic-v2")
# Keys the Craftax engine has no use for (pixels, replay, actors, the DQN, torch itself).
TORCH_KEYS: Final = (
    "frame_stack", "nstep", "batch_size", "replay_buffer_size", "replay_buffer_num_workers",
    "num_actors", "actor_sync_frames", "use_image", "use_language_state", "precision",
    "compile", "torch_threads", "lr", "clip_reward", "num_seed_frames", "save_buffer",
    "expl_agent_path", "other_model_prob", "train_after_reward",
    "decay_after_reward", "use_extr_rew", "single_goal_eval", "finetune_settings", "agent",
    "env_spec.action_space_type", "env_spec.single_task", "env_spec.single_goal_hierarchical",
    "env_spec.novelty_goals", "env_spec.text_obs", "env_spec.use_language_state",
    "env_spec.check_ac_success",
)
# Seeds a process trains at once; each keeps its own records.
MAX_SEEDS: Final = 64


def is_craftax(cfg: DictConfig) -> bool:
    return str(OmegaConf.select(cfg, "env_spec.name", default="")).startswith("Craftax")


def engine_key_error(key: str, craftax: bool, env_name: str) -> str | None:
    """Why an override of ``key`` does not fit the engine the run uses, else None."""
    bare = key.lstrip("+~")
    if craftax:
        if bare in TORCH_KEYS or bare.startswith(("agent.", "agent/", "env_spec.housekeep")) \
                or any(bare.startswith(k + ".") for k in TORCH_KEYS):
            return (f"{bare} is a key of the torch engine (pixels, replay, actors, the DQN): "
                    f"env_spec.name={env_name} runs on the Craftax engine, which does not read "
                    "it (docs/craftax.md lists its keys under craftax.*)")
        return None
    if bare == "seeds" or bare.startswith("craftax"):
        return (f"{bare} is a key of the Craftax engine: env_spec.name={env_name} runs on the "
                "torch engine, which does not read it (set env_spec.name=Craftax-Classic-v1 "
                "for the Craftax engine)")
    return None


def check_overrides(overrides: list[str], cfg: DictConfig) -> None:
    """Each command-line key fits the engine ``cfg`` runs on (ConfigError naming the key)."""
    craftax = is_craftax(cfg)
    name = OmegaConf.select(cfg, "env_spec.name")
    for override in overrides:
        key, _, value = override.partition("=")
        if key == "agent" and value in ALIAS_METHODS:
            continue
        why = engine_key_error(key, craftax, name)
        if why:
            raise ConfigError(why)
    method = OmegaConf.select(cfg, "method")
    if craftax and method in set(TORCH_METHODS) - set(CRAFTAX_METHODS):
        raise ConfigError(f"method={method} runs on the torch engine only; the Craftax engine "
                          f"trains {', '.join(CRAFTAX_METHODS)}")
    if not craftax and method in set(CRAFTAX_METHODS) - set(TORCH_METHODS):
        raise ConfigError(f"method={method} runs on the Craftax engine only "
                          "(env_spec.name=Craftax-Classic-v1 or -v2)")


def _power_of_two(v: int) -> bool:
    return isinstance(v, int) and v >= 8 and v & (v - 1) == 0


@dataclass(frozen=True)
class CraftaxOptions:
    """``craftax.*`` (documented in config.yaml)."""

    num_envs: int = integer(1, high=65536)
    num_steps: int = integer(2, high=4096)
    hidden: int = integer(1, high=MAX_WIDTH)
    layers: int = integer(1, high=16)
    lr: float = valid("a number in (0, 1)", lambda v: is_num(v) and 0 < v < 1)
    max_grad_norm: float = valid("a positive number", lambda v: is_num(v) and v > 0)
    td_lambda: float = probability()
    epochs: int = integer(1, high=64)
    minibatches: int = integer(1, high=4096)
    eps_start: float = probability()
    eps_end: float = probability()
    eps_decay_frac: float = probability()
    eval_epsilon: float = probability()
    updates_per_chunk: int = integer(1, high=100000)
    reset_worlds: int = integer(1, high=65536)
    goal_table_size: int = valid("a power of two >= 8 (at most 2**24)",
                                 lambda v: _power_of_two(v) and v <= 2**24)
    goal_weight: float = valid("a number >= 0", lambda v: is_num(v) and v >= 0)
    bonus_weight: float = valid("a number >= 0", lambda v: is_num(v) and v >= 0)
    extrinsic_weight: float | None = valid("null or a number >= 0",
                                           lambda v: v is None or (is_num(v) and v >= 0))


@dataclass(frozen=True)
class CraftaxSpec:
    """A Craftax run, parsed: what the host loop reads."""

    env_id: str
    method: str
    goal_source: str | None
    seeds: tuple[int, ...]
    frames: int          # per seed
    eval_every: int
    eval_episodes: int
    length: int
    threshold: float
    options: CraftaxOptions
    loop: LoopConfig
    basics: RunBasics
    lm: dict[str, Any]
    cfg: DictConfig      # the whole config, for the run's records only
    finetune_from: str | None = None   # a pretrained run's snapshot: its weights start this run


def parse_spec(cfg: DictConfig) -> CraftaxSpec:
    """The run ``cfg`` asks for, every key checked (ConfigError names the key)."""
    env_id = OmegaConf.select(cfg, "env_spec.name")
    if env_id not in ENV_IDS:
        raise ConfigError(f"env_spec.name={env_id!r} is invalid: the Craftax engine runs "
                          f"{', '.join(ENV_IDS)}")
    method = OmegaConf.select(cfg, "method", default="ellm")
    if method not in CRAFTAX_METHODS:
        raise ConfigError(f"method={method!r} is invalid on the Craftax engine: expected one of "
                          f"{', '.join(CRAFTAX_METHODS)}")
    opts = parse(CraftaxOptions, cfg.craftax, "craftax.")
    warn_ignored(cfg)
    seeds = cfg.get("seeds", 1)
    if not (isinstance(seeds, int) and not isinstance(seeds, bool) and 1 <= seeds <= MAX_SEEDS):
        raise ConfigError(f"seeds={seeds!r} is invalid: expected an integer in [1, {MAX_SEEDS}]")
    seed = cfg.seed
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**31 - MAX_SEEDS):
        raise ConfigError(f"seed={seed!r} is invalid: expected an integer in [0, 2**31 - 65)")
    for key in ("num_train_frames", "eval_every_frames", "num_eval_episodes"):
        value = cfg.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**40):
            raise ConfigError(f"{key}={value!r} is invalid: expected an integer in [0, 2**40]")
    batch = opts.num_envs * opts.num_steps
    if batch % opts.minibatches:
        raise ConfigError(f"craftax.minibatches={opts.minibatches} must divide craftax.num_envs "
                          f"x craftax.num_steps = {batch}")
    length = cfg.env_spec.length
    if not (isinstance(length, int) and 1 <= length <= 100000):
        raise ConfigError(f"env_spec.length={length!r} is invalid: expected an integer in "
                          "[1, 100000]")
    threshold = cfg.env_spec.threshold
    if not (is_num(threshold) and -1 <= threshold < 1):
        raise ConfigError(f"env_spec.threshold={threshold!r} is invalid: expected a number in "
                          "[-1, 1)")
    parts, learns = METHODS[method].craftax, METHODS[method].learns
    source, bonus, extrinsic = parts.goal_source, parts.bonus, parts.extrinsic_weight
    if source == "lm":
        lm_class = OmegaConf.select(cfg, "env_spec.lm_spec.lm_class")
        source = {"SimpleOracle": "oracle", "GPTLanguageModel": "llm", "Novelty": "novelty"}.get(
            LM_CLASS_ALIASES.get(lm_class, lm_class), "oracle")
        if source == "novelty":
            method = "novelty"
    if opts.extrinsic_weight is not None:
        extrinsic = opts.extrinsic_weight
    frames = int(cfg.num_train_frames)
    finetune_from = None
    if cfg.get("finetune_snapshot"):
        finetune_from = cfg.get("snapshot_path")
        if not finetune_from:
            raise ConfigError("finetune_snapshot=True needs snapshot_path: the pretrained Craftax "
                              "run's dir (or its snapshot.npz)")
        if not learns:
            raise ConfigError(f"finetune_snapshot=True with method={method}: that method does "
                              "not learn, so there are no weights to finetune")
    loop = LoopConfig(
        goal_source=source, bonus=bonus, goal_weight=opts.goal_weight,
        bonus_weight=opts.bonus_weight, extrinsic_weight=float(extrinsic), learns=learns,
        paper_setting=env_id.endswith("v1"), num_envs=opts.num_envs, num_steps=opts.num_steps,
        eps_start=opts.eps_start, eps_end=opts.eps_end,
        eps_decay_frames=float(opts.eps_decay_frac * frames),
        eval_epsilon=opts.eval_epsilon, reset_worlds=min(opts.reset_worlds, opts.num_envs),
        pqn=PQNConfig(hidden=opts.hidden, layers=opts.layers, lr=float(opts.lr),
                      max_grad_norm=float(opts.max_grad_norm), gamma=float(cfg.discount),
                      lam=float(opts.td_lambda), epochs=opts.epochs, minibatches=opts.minibatches))
    return CraftaxSpec(env_id=env_id, method=method, goal_source=source,
                       basics=parse(RunBasics, cfg),
                       lm=OmegaConf.to_container(cfg.env_spec.lm_spec, resolve=True), cfg=cfg,
                       seeds=tuple(range(seed, seed + seeds)), frames=frames,
                       eval_every=int(cfg.eval_every_frames),
                       eval_episodes=int(cfg.num_eval_episodes), length=length,
                       threshold=float(threshold), options=opts, loop=loop,
                       finetune_from=str(finetune_from) if finetune_from else None)


