"""Train an ELLM agent: ``python train.py [key=value ...]`` (Hydra; see config.yaml and README)."""

from __future__ import annotations

import itertools
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    from ellm.conf import GROUPS, group_dir, resumes
    from ellm.run.checkpoint import SNAPSHOT_NAME
    from ellm.run.command_line import (
        CONFIG_ERROR,
        key_from_config_file,
        remove_if_empty,
        take_key_overrides,
    )
except ModuleNotFoundError as missing:  # the system python, not the project's venv
    sys.exit(f"error: {sys.executable} has no {missing.name!r}: run .venv/bin/python train.py "
             "(bash scripts/main.sh creates .venv) or activate the venv first")

log = logging.getLogger("ellm")
# Each job's spec as check_before_hydra parsed it, by the job's config: a job Hydra runs in this
# process takes it, with the lines its check logged, instead of parsing again.
_CHECKED: dict[str, tuple[Any, list[logging.LogRecord]]] = {}
ROOT = Path(__file__).resolve().parent


def _run_dir(snapshot_path, finetune_snapshot, default: str) -> str:
    """Resuming (snapshot_path without finetune_snapshot) continues in the snapshot's run dir."""
    if not resumes(snapshot_path, finetune_snapshot):
        return default
    path = Path(str(snapshot_path)).expanduser()
    return str(path.parent if path.name == SNAPSHOT_NAME or path.is_file() else path)


OmegaConf.register_new_resolver("ellm_run_dir", _run_dir, replace=True)

def help_text() -> str:
    """``--help``: our groups and every documented key, without Hydra's directory scan."""
    groups = "\n".join(
        f"  {group}: {', '.join(sorted(p.stem for p in group_dir(group).glob('*.yaml')))}"
        for group in GROUPS)
    return f"""usage: python train.py [key=value ...] [group=option ...] [-m key=a,b ...]

Train an ELLM agent (or a baseline) on Text-Crafter, Text-Housekeep or Craftax-Classic. Every
key below can be overridden on the command line, e.g.
  python train.py env_spec.use_sbert=True use_goal=True use_language_state=sbert \\
      env_spec.lm_spec.lm_class=SimpleOracle exp_name=TEST_RUN

Config groups (group=option):
{groups}
  hydra/launcher: ellm_local (the original's submitit_local request; needs the slurm extra),
                  submitit_local, submitit_slurm

-m / --multirun sweeps comma-separated values (seeds, methods); --cfg job prints the composed
config; --hydra-help lists Hydra's own options. A config that cannot work stops before
training with a message naming the key and exit code {CONFIG_ERROR}. README.md explains the run
directory, the metrics and the reports.

Every key, documented where it is defined ({ROOT / 'config.yaml'}):

{(ROOT / 'config.yaml').read_text()}"""


def _job_overrides(argv: list[str]) -> list[list[str]]:
    """The override lists of the jobs a command line launches: one without ``-m``, the
    product of the comma/range sweeps with it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweep = any(a in ("-m", "--multirun") for a in argv)
    # Hydra's own keys (launcher, sweeper, dirs) are Hydra's to check, not part of a job's config.
    args = [a for a in argv if a not in ("-m", "--multirun")
            and not a.lstrip("+~").startswith(("hydra.", "hydra/"))]
    if not sweep:
        return [args]
    choices = []
    for override in OverridesParser.create().parse_overrides(args):
        if override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={v}" for v in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(job) for job in itertools.product(*choices)]


def check_before_hydra(argv: list[str]) -> list[str]:
    """Compose and validate the config of every job before Hydra creates a directory: a
    rejected config leaves nothing behind. Returns ``argv``, with the override that blanks a
    key a config file holds (:func:`ellm.run.command_line.key_from_config_file`). Hydra's own flags
    (``--cfg``, ...) skip the check."""
    if any(a.startswith("-") and a not in ("-m", "--multirun") for a in argv):
        return argv
    blank: list[str] = []
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from ellm.craftax.options import check_overrides
    from ellm.method import check_agent_alias
    from ellm.run.checkpoint import CheckpointError
    from ellm.run.config import ConfigError, check_added_keys

    logging.disable(logging.WARNING)  # a job's own lines are kept for its log (kept_log)
    try:
        with initialize_config_dir(str(ROOT), version_base="1.3"):
            argv = plus_on_existing(argv, compose)
            for overrides in _job_overrides(argv):
                check_agent_alias(overrides)
                cfg = compose_job(overrides, compose)
                blank = blank or key_from_config_file(cfg)
                check_added_keys(cfg, added_keys(overrides, compose))
                check_overrides(overrides, cfg)
                with kept_log() as records:
                    spec = job_spec(cfg, overrides)
                _CHECKED[OmegaConf.to_yaml(cfg)] = (spec, records)
    except (HydraException, ConfigError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(CONFIG_ERROR)
    finally:
        logging.disable(logging.NOTSET)
    return argv + blank


def job_spec(cfg: DictConfig, overrides: list[str]) -> Any:
    """The one parse of a job's config: a ``RunSpec`` (torch engine) or a ``CraftaxSpec``."""
    from ellm.craftax.options import is_craftax, parse_spec
    from ellm.run.config import validate

    if is_craftax(cfg):
        return parse_spec(cfg)
    return validate(effective_config(cfg, overrides))


@contextmanager
def kept_log() -> Iterator[list[logging.LogRecord]]:
    """The lines ellm logs meanwhile (info and up), kept rather than shown: before Hydra starts
    a job there is no run log to write them to, and the job logs them (:func:`checked_spec`)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    handler.addFilter(lambda r: r.name.startswith("ellm") or r.levelno >= logging.WARNING)
    root = logging.getLogger()
    saved, root.handlers, level = root.handlers, [handler], root.level
    root.setLevel(logging.INFO)
    logging.disable(logging.NOTSET)
    try:
        yield records
    finally:
        logging.disable(logging.WARNING)
        root.handlers, root.level = saved, level


def checked_spec(cfg: DictConfig, run_dir: Path) -> Any:
    """The job's spec: check_before_hydra's where it parsed this config in this process (its
    lines are logged now), else parsed here (a job another process runs, e.g. under SLURM)."""
    spec, records = _CHECKED.pop(OmegaConf.to_yaml(cfg), (None, []))
    for record in records:
        logging.getLogger(record.name).handle(record)
    if spec is not None:
        return spec
    return build_or_exit(lambda: job_spec(cfg, list(HydraConfig.get().overrides.task)), run_dir)


def compose_job(overrides: list[str], compose: Any) -> DictConfig:
    """A job's config; a key it does not have gets "did you mean" before Hydra's "use +key"."""
    from hydra.errors import HydraException

    from ellm.run.config import check_added_keys

    try:
        return compose("config", overrides=overrides)
    except HydraException as exc:
        found = re.match(r"Could not override '([^']+)'", str(exc))
        if found is None:
            raise
        rest = [o for o in overrides if o.partition("=")[0].lstrip("~") != found.group(1)]
        check_added_keys(compose("config", overrides=rest), [found.group(1)])
        raise


def plus_on_existing(argv: list[str], compose: Any) -> list[str]:
    """``+key=v`` as ``++key=v`` where config.yaml has the key: keys once added with ``+``
    (``+env_spec.lm_spec.price=...``) are in it now, and Hydra refuses to add them again."""
    plus = [a for a in argv if a.startswith("+") and not a.startswith("++")]
    if not plus:
        return argv
    base = compose("config", overrides=_job_overrides([a for a in argv if a not in plus])[0])
    return [f"+{a}" if a in plus and OmegaConf.select(
        base, a[1:].partition("=")[0], default=_ABSENT) is not _ABSENT else a for a in argv]


def added_keys(overrides: list[str], compose: Any) -> list[str]:
    """The keys ``+key=value`` overrides add: those the config has no place for without them."""
    plus = [o for o in overrides if o.startswith("+")]
    if not plus:
        return []
    base = compose("config", overrides=[o for o in overrides if o not in plus])
    keys = [o.lstrip("+").partition("=")[0] for o in plus]
    return [k for k in keys if OmegaConf.select(base, k, default=_ABSENT) is _ABSENT]


_ABSENT = object()


def effective_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The config a job runs with: a resumed run's is its snapshot's, with what the command
    line may change on top; a finetuned or guiding agent's structure is its run's
    (:mod:`ellm.run.resume`)."""
    from hydra import compose

    from ellm.run.resume import inherited_config, resumed_config, resuming

    def composed(o: list[str]) -> DictConfig:
        return compose("config", overrides=o)

    if not resuming(cfg):
        return inherited_config(cfg, overrides, composed)
    return resumed_config(cfg, overrides, composed)


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg: DictConfig) -> None:
    from ellm.actors import ActorFailed
    from ellm.loop import interrupt
    from ellm.loop.workspace import Workspace

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    interrupt.install()
    from ellm.craftax.options import is_craftax

    spec = checked_spec(cfg, run_dir)
    if is_craftax(cfg):
        return train_craftax(spec, run_dir)
    workspace = build_or_exit(lambda: Workspace(spec, run_dir), run_dir)
    try:
        workspace.train()
    except ActorFailed as exc:  # its traceback is in the log already
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C: the actors are joined and the files closed by now
        interrupted(f"interrupted at frame {workspace.counters.frame}; resume from the last "
                    f"snapshot with snapshot_path={run_dir}")
    print("\n" + workspace.closing_message())


def build_or_exit(make: Any, run_dir: Path) -> Any:
    """The run ``make`` builds; a config it refuses exits 2 and leaves no run dir."""
    from ellm.run.checkpoint import CheckpointError
    from ellm.run.config import ConfigError

    try:
        return make()
    except (ConfigError, CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        remove_if_empty(run_dir)
        sys.exit(CONFIG_ERROR)


def interrupted(message: str) -> None:
    """Ctrl-C's last words, on stderr and in train.log (not twice on the console)."""
    print(f"\n{message}", file=sys.stderr)
    record = log.makeRecord(log.name, logging.WARNING, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    sys.exit(130)


def train_craftax(spec: Any, run_dir: Path) -> None:
    """The Craftax engine's run (docs/craftax.md): the same front door, records and exit codes."""
    from ellm.craftax.run import CraftaxRun

    run = build_or_exit(lambda: CraftaxRun(spec, run_dir), run_dir)
    try:
        run.train()
    except KeyboardInterrupt:
        run.close()
        interrupted(f"interrupted at frame {run.frame} per seed; resume from the last snapshot "
                    f"with snapshot_path={run_dir}")
    print("\n" + run.closing_message())


if __name__ == "__main__":
    try:
        args = take_key_overrides(sys.argv[1:])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(CONFIG_ERROR)
    if any(a in ("-h", "--help") for a in args):
        try:
            print(help_text())
        except BrokenPipeError:  # `python train.py --help | head`
            sys.stderr.close()
        sys.exit(0)
    from ellm.run.config import ConfigError, check_config_file

    try:
        check_config_file(args, ROOT)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(CONFIG_ERROR)
    sys.argv[1:] = check_before_hydra(args)
    main()
