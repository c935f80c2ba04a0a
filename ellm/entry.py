"""What every Hydra entry point shares: one exit code and no run dir for a rejected config."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ellm.files import atomic_write

CONFIG_ERROR = 2


class Run(Protocol):
    def run(self) -> dict[str, float]: ...

    def closing_message(self, metrics: dict[str, float]) -> str: ...


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (never a torn file)."""
    with atomic_write(path, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    return path


def write_record(run_dir: Path, record: dict[str, Any]) -> Path:
    """``run_dir/config.json``: what the run is (config, method, game), written atomically."""
    return write_json(run_dir / "config.json", record)


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

    main()
