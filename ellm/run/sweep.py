"""What a Hydra sweep (``-m``) says once its jobs are done: where its runs are, how to report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def closing_message(sweep_dir: Path) -> str:
    runs = [p for p in sweep_dir.iterdir() if (p / "config.json").is_file()] \
        if sweep_dir.is_dir() else []
    return (f"Sweep done: {len(runs)} run{'s' * (len(runs) != 1)} in {sweep_dir}\n"
            f"Plot them together: python -m ellm_tools.report {sweep_dir}  "
            f"(writes {sweep_dir / 'report'})")


class SweepClosing(Callback):
    """Prints :func:`closing_message` of the sweep directory at the end of a multirun."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        print("\n" + closing_message(Path(config.hydra.sweep.dir)), flush=True)
