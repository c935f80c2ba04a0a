"""The training config, checked and parsed once before anything starts, and secret-free copies."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from ellm.agent.precision import check_compile, check_precision
from ellm.errors import ConfigError
from ellm.games import find_game
from ellm.lm import LMSpec, check_cache, parse_lm_spec
from ellm.lm.config import adopt_config_key
from ellm.method import resolve_method
from ellm.run import checkpoint
from ellm.run.schema import parse
from ellm.run.spec import (
    IGNORED_KEYS,
    EnvOptions,
    RunOptions,
    RunSpec,
    leaves,
    warn_ignored,
)

SECRET_KEYS = frozenset({"openai_key", "openai_org", "api_key"})
REDACTED = "<redacted>"
log = logging.getLogger(__name__)

AGENT_ALIASES = {"dqn.DQNAgent": "ellm.agent.DQNAgent"}
# Top-level keys that the agent block takes (agent.x: ${x}) and the rollout reads too.
AGENT_KEYS_AT_TOP = ("lr", "use_image", "use_goal", "use_language_state", "finetune_settings",
                     "other_model_prob")

UNSUPPORTED = {
    "env_spec.use_state_captioner": "learned captioners need weights the authors never published",
    "env_spec.use_transition_captioner": "learned captioners need weights the authors never published",
    "save_video": "eval videos are not implemented",
    "save_offline": "offline datasets are not implemented",
    "use_offline_buffer": "offline datasets are not implemented",
    "offline_buffer": "offline datasets are not implemented",
}


def validate(cfg: DictConfig) -> RunSpec:
    """Check the whole config before anything is built; returns it parsed."""
    run = parse(RunOptions, cfg)
    game = find_game(OmegaConf.select(cfg, "env_spec.name"))
    env = parse(EnvOptions, cfg.env_spec, "env_spec.")
    agent = agent_options(cfg)
    agent.check_run(frame_stack=cfg.frame_stack, nstep=cfg.nstep, batch_size=cfg.batch_size)
    lm = check_lm_spec(cfg.env_spec.lm_spec, by_lm_class=True)
    if adopt_config_key(cfg.env_spec.lm_spec, lm):
        log.warning("env_spec.lm_spec.openai_key in a config file is deprecated: export "
                    "OPENAI_API_KEY instead")
    warn_ignored(cfg)
    for key, why in UNSUPPORTED.items():
        if OmegaConf.select(cfg, key):
            raise ConfigError(f"{key}={OmegaConf.select(cfg, key)!r} is not supported: {why}")
    if cfg.finetune_snapshot and not cfg.snapshot_path:
        if not cfg.expl_agent_path:
            raise ConfigError("finetune_snapshot=True needs snapshot_path (the pretrained run)")
        # The original README's Housekeep guided-exploration command passes it with no snapshot.
        log.warning("finetune_snapshot=True without snapshot_path: no weights are loaded, the "
                    "agent starts fresh and expl_agent_path only guides its exploration")
    game_options = game.validate(cfg, env, lm)
    method = resolve_method(cfg, game)
    if cfg.use_goal and not (method.goal_reward or method.game_reward):
        log.warning("use_goal=True with method=%s: its agent reads goals that pay it nothing (%s "
                    "rewards novelty), and 'none' where no goal is suggested; drop use_goal=True "
                    "unless that is the experiment", method.name, method.name.upper())
    device = resolve_device(cfg.device)
    check_precision(cfg.precision, device)
    check_compile(cfg.compile, device)
    for key in ("snapshot_path", "expl_agent_path"):
        if cfg[key]:
            checkpoint.check(cfg[key], key)
    return RunSpec(cfg, game, method, agent, lm, device, run, env, game_options,
                   agent_target(cfg))


def agent_target(cfg: DictConfig) -> str:
    """The agent class to build: ``agent._target_`` with the original's spellings mapped."""
    return AGENT_ALIASES.get(cfg.agent._target_, cfg.agent._target_)


def check_added_keys(cfg: DictConfig, added: Iterable[str]) -> None:
    """Refuse a ``+key=value`` key no schema knows: Hydra would start a default run on a typo."""
    from ellm.lm.config import LMSpec

    known = {f"env_spec.lm_spec.{f.name}" for f in dataclasses.fields(LMSpec)}
    known |= {f"agent.{f.name}" for f in dataclasses.fields(_agent_schema(cfg))}
    known |= set(IGNORED_KEYS)
    for key in added:
        if key in known:
            continue
        existing = set(leaves(OmegaConf.to_container(cfg, resolve=False))) | known
        close = difflib.get_close_matches(key, existing - {key}, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(f"{key} is not a key of this config (+{key}=... adds a key that no "
                          f"part of the run reads, so it would change nothing){hint}")


def _agent_schema(cfg: DictConfig) -> type:
    """The options dataclass (``Options``) of the agent class ``agent._target_`` names."""
    target = cfg.agent.get("_target_")
    if not (isinstance(target, str) and "." in target):
        raise ConfigError(f"agent._target_={target!r} is invalid: expected a dotted class path, "
                          "e.g. ellm.agent.DQNAgent")
    module, _, name = agent_target(cfg).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"agent._target_={target!r} is invalid: {err}") from None
    schema = getattr(cls, "Options", None)
    if not dataclasses.is_dataclass(schema):
        raise ConfigError(f"agent._target_={target!r} is invalid: expected an agent class with "
                          "an Options dataclass of its keys (e.g. a subclass of "
                          "ellm.agent.DQNAgent)")
    return schema


def agent_options(cfg: DictConfig) -> Any:
    """The ``agent`` block parsed by the options dataclass of its class; a bad value that
    ``agent.x: ${y}`` takes from a top-level key is reported under the key the user sets, y.
    Where ``agent.x`` is set apart from the top-level ``x`` that the rollout reads, the two
    must agree."""
    keys = {}
    for name, source in OmegaConf.to_container(cfg.agent, resolve=False).items():
        if isinstance(source, str) and re.fullmatch(r"\$\{([\w.]+)\}", source):  # "${use_goal}"
            keys[str(name)] = source[2:-1]
    options = parse(_agent_schema(cfg), cfg.agent, "agent.", keys)
    for name in AGENT_KEYS_AT_TOP:
        if name not in keys and name in cfg and cfg[name] != getattr(options, name, cfg[name]):
            raise ConfigError(f"agent.{name}={getattr(options, name)!r} and {name}={cfg[name]!r} "
                              f"disagree: the agent reads agent.{name}, the rollout {name}; set "
                              f"{name} (agent.{name} follows it)")
    return options


def resolve_device(device: Any) -> torch.device:
    """``auto`` picks cuda when available; asking for cuda without one is an error."""
    if not isinstance(device, str):
        raise ConfigError(f"device={device!r} is invalid: expected auto, cpu, cuda or cuda:N")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"device={device!r} is invalid: {exc}") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device={device!r} but this machine has no CUDA GPU usable by torch "
            f"{torch.__version__}; use device=cpu or device=auto")
    if resolved.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={device!r} is invalid: expected auto, cpu, cuda or cuda:N")
    return resolved


def usable_cpus() -> int:
    """CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def resolve_threads(threads: Any, cpus: int | None = None) -> int:
    """Torch threads of one run: ``auto`` = half the CPUs, so two runs sharing a box do not fight.
    """
    if threads != "auto":
        return int(threads)
    return max(1, (cpus or usable_cpus()) // 2)


def resolve_workers(workers: Any, cpus: int | None = None) -> int:
    """Replay DataLoader workers: ``auto`` = half the CPUs, at most 4 (the original's default)."""
    if workers != "auto":
        return int(workers)
    return min(4, (cpus or usable_cpus()) // 2)


# Hydra's flags that name the primary config file, by what they give.
CONFIG_FLAGS = {"--config-name": "name", "-cn": "name", "--config-path": "path", "-cp": "path",
                "--config-dir": "dir", "-cd": "dir"}
MAX_CONFIG_BYTES = 16 * 2**20


def check_config_file(argv: Sequence[str], root: Path) -> None:
    """The file ``--config-name`` names (in ``--config-dir``, ``--config-path`` or ``root``) is a
    YAML mapping: on anything else Hydra stops with its parser's traceback. A name no folder
    holds is left to Hydra, which says where it looked."""
    flags: dict[str, str] = {}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in CONFIG_FLAGS:
            flags[CONFIG_FLAGS[flag]] = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    if not flags.get("name"):
        return
    name = flags["name"] if flags["name"].endswith((".yaml", ".yml")) else f"{flags['name']}.yaml"
    folders = [Path(flags["dir"])] if flags.get("dir") else []
    folders.append(root / flags["path"] if flags.get("path") else root)  # absolute stays absolute
    found = next((f / name for f in folders if (f / name).is_file()), None)
    if found is not None:
        _check_yaml(found, f"--config-name={flags['name']}")


def _check_yaml(path: Path, what: str) -> None:
    expected = "expected a YAML file of key: value lines, as config.yaml"
    with path.open("rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what}: {str(path)!r} is not a config ({expected}): it is over "
                          f"{MAX_CONFIG_BYTES // 2**20} MiB")
    try:
        loaded = yaml.safe_load(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what}: {str(path)!r} is not a config ({expected}): byte "
                          f"{exc.object[exc.start]:#04x} at offset {exc.start} is not UTF-8 "
                          "text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{what}: {str(path)!r} is not YAML ({expected}): {problem}{where}") \
            from None
    if not isinstance(loaded, dict | None):
        raise ConfigError(f"{what}: {str(path)!r} holds a YAML {type(loaded).__name__}, "
                          f"{expected}")


def check_lm_spec(raw: Any, *, by_lm_class: bool = False) -> LMSpec:
    """Check ``env_spec.lm_spec`` (and its cache) before a run starts; ConfigError names the key."""
    try:
        spec = parse_lm_spec(raw)
        if not by_lm_class or spec.lm_class == "GPTLanguageModel":
            check_cache(spec)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return spec


def run_config(cfg: DictConfig, client: Any = None) -> dict[str, Any]:
    """The config a run records, naming the model that actually answers ``client``."""
    config = redacted(cfg)
    if client is not None:
        config["env_spec"]["lm_spec"]["lm"] = client.spec.lm
    return config


def redacted(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain data with every secret-bearing key blanked."""
    data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)

    def scrub(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (REDACTED if k in SECRET_KEYS and v else scrub(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [scrub(v) for v in node]
        return node

    return scrub(data)


__all__ = [
    "AGENT_ALIASES",
    "IGNORED_KEYS",
    "ConfigError",
    "EnvOptions",
    "RunOptions",
    "RunSpec",
    "agent_options",
    "agent_target",
    "check_added_keys",
    "check_config_file",
    "check_lm_spec",
    "leaves",
    "parse",
    "redacted",
    "resolve_device",
    "resolve_threads",
    "resolve_workers",
    "run_config",
    "usable_cpus",
    "validate",
]
