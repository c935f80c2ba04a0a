"""What every Hydra entry point shares: one exit code and no run dir for a rejected config."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ellm.run.atomic import atomic_write

CONFIG_ERROR = 2


class Run(Protocol):
    def run(self) -> dict[str, float]: ...

    def closing_message(self, metrics: dict[str, float]) -> str: ...


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as strict JSON (no NaN or Infinity) to ``path`` atomically."""
    with atomic_write(path, "w") as f:
        json.dump(data, f, indent=2, allow_nan=False)
        f.write("\n")
    return path


def write_record(run_dir: Path, record: dict[str, Any]) -> Path:
    """``run_dir/config.json``: what the run is (config, method, game) and the code it ran
    (``code_commit``), written atomically."""
    return write_json(run_dir / "config.json", {**record, "code_commit": code_commit()})


def code_commit() -> str | None:
    """The git commit of this checkout, with ``+dirty`` when tracked files differ from it;
    None outside a git checkout (an installed wheel)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]  # ellm/run/ -> the checkout
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def run_dir_lines(run_dir: Path) -> list[str]:
    return [f"Run dir: {run_dir}",
            f"Plot it: python -m ellm_tools.report {run_dir}  (writes {run_dir / 'report'})"]


def remove_if_empty(run_dir: Path) -> None:
    """Remove a run dir Hydra made for a job that failed validation, and its empty parents."""
    for path in (run_dir, *run_dir.parents):
        if path == Path.cwd() or not path.is_dir() or any(path.iterdir()):
            break
        shutil.rmtree(path, ignore_errors=True)


def run_in_hydra_dir(make_run: Callable[[Any, Path], Run], cfg: Any) -> None:
    """Build and run a run in Hydra's output dir; a rejected config leaves no directory."""
    from hydra.core.hydra_config import HydraConfig

    from ellm.errors import ConfigError

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run = make_run(cfg, run_dir)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        remove_if_empty(run_dir)
        sys.exit(CONFIG_ERROR)
    metrics = run.run()
    print("\n" + run.closing_message(metrics))


def hydra_entry(make_run: Callable[[Any, Path], Run], config: Path) -> None:
    """``python -m PACKAGE.MODULE [key=value ...]``: Hydra composes ``config``, then ``make_run``.
    """
    import hydra

    @hydra.main(version_base="1.3", config_path=str(config.parent), config_name=config.stem)
    def main(cfg: Any) -> None:
        run_in_hydra_dir(make_run, cfg)

    try:
        sys.argv[1:] = take_key_overrides(sys.argv[1:])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(CONFIG_ERROR)
    main()


# The one secret a config can hold (the original README's spelling); docs/lm.md, "Secrets".
KEY_NAME = "openai_key"
KEY_PLACES = (KEY_NAME, f"env_spec.lm_spec.{KEY_NAME}")  # config.yaml's two


def take_key_overrides(argv: list[str]) -> list[str]:
    """``argv`` with every API key taken out into :data:`ellm.lm.config.LEGACY_KEY_ENV`.

    The original README passes the key on the command line. Hydra prints overrides when it
    launches a sweep and stores them in ``multirun.yaml``, and W&B records ``argv``, so a key
    must leave ``argv`` in every spelling: ``openai_key=K``, ``env_spec.lm_spec.openai_key=K``
    or inside a dict override such as ``env_spec.lm_spec={lm_class: ..., openai_key: K}``.
    """
    return [kept for arg in argv if (kept := _without_key(arg)) is not None]


def _without_key(arg: str) -> str | None:
    """``arg`` without its key (None when nothing of it is left); ConfigError, naming the
    override's key and never its value, when it may hold a key this cannot take out."""
    if KEY_NAME not in arg or arg.startswith("-"):
        return arg
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from ellm.errors import ConfigError

    name = arg.partition("=")[0]
    refuse = ConfigError(f"the override {name}=... holds {KEY_NAME} in a form that cannot be "
                         "kept out of Hydra's records: export OPENAI_API_KEY (or the variable "
                         "env_spec.lm_spec.api_key_env names) instead")
    try:
        override = OverridesParser.create().parse_override(arg)
    except HydraException:
        raise refuse from None
    key = override.key_or_group
    if key.rpartition(".")[2] == KEY_NAME:
        if override.is_sweep_override():
            raise refuse
        _adopt_key(override.value(), key)
        return None
    if override.is_sweep_override():
        if any(KEY_NAME in str(v) for v in override.sweep_string_iterator()):
            raise refuse
        return arg
    value = override.value()
    stripped, keys = _strip_keys(value)
    if not keys:
        return arg
    for found in keys:
        _adopt_key(found, f"{key}.{KEY_NAME}")
    prefix = arg[:len(arg) - len(arg.lstrip("+~"))]
    rebuilt = f"{prefix}{key}={_hydra_literal(stripped)}"
    try:  # the rebuilt override must mean the same, less the key, or it is refused
        same = OverridesParser.create().parse_override(rebuilt).value() == stripped
    except HydraException:
        same = False
    if not same:
        raise refuse
    return rebuilt


def _adopt_key(value: object, where: str) -> None:
    import logging

    from ellm.lm.config import LEGACY_KEY_ENV

    if value in (None, "", "null", "None"):
        return
    os.environ[LEGACY_KEY_ENV] = str(value)
    logging.getLogger("ellm").warning("%s on the command line is deprecated: export "
                                      "OPENAI_API_KEY instead", where)


def _strip_keys(value: Any) -> tuple[Any, list[Any]]:
    """``value`` without any ``openai_key`` entry at any depth, and the keys it held."""
    found: list[Any] = []

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == KEY_NAME:
                    found.append(v)
                else:
                    out[k] = strip(v)
            return out
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(value), found


def _hydra_literal(value: Any) -> str:
    """``value`` in Hydra's override grammar (strings quoted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_hydra_literal(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def key_from_config_file(cfg: Any) -> list[str]:
    """A key a config file holds goes to the environment as a command-line key does, and the
    overrides that blank it in every job are returned: else a sweep's ``multirun.yaml`` and a
    SLURM job's pickled config would carry it. [] when the config holds none."""
    from omegaconf import OmegaConf

    from ellm.lm.config import LEGACY_KEY_ENV

    blank = []
    for where in KEY_PLACES:
        value = OmegaConf.select(cfg, where, default=None)
        if value not in (None, ""):
            os.environ.setdefault(LEGACY_KEY_ENV, str(value))  # the command line's wins
            blank.append(f"{where}=null")
    return blank
