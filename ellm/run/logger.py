"""One logger for every metric: namespaced keys fanned out to CSV, TensorBoard and W&B.

A W&B failure is reported once and W&B switched off: it never stops training.
"""

from __future__ import annotations

import csv
import logging
import warnings
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ellm.run.atomic import atomic_write

log = logging.getLogger(__name__)


class CsvFile:
    """A CSV file whose header grows with new keys; a resumed run drops rows after its snapshot,
    so frames trained again are not duplicated.
    """

    def __init__(self, path: Path, keep_until: int | None = None):
        self.path = path
        self.fields: list[str] = []
        if path.exists():
            with path.open(newline="") as f:
                self.fields = next(csv.reader(f), [])
            if keep_until is not None:
                self._rewrite(self.fields, keep_until)

    def write(self, row: Mapping[str, Any]) -> None:
        new = [k for k in row if k not in self.fields]
        if new:
            self._rewrite(self.fields + new)
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=self.fields).writerow(row)

    def _rewrite(self, fields: list[str], keep_until: int | None = None) -> None:
        rows = []
        if self.path.exists():
            text = self.path.read_text()
            if not text.endswith("\n"):
                text = text[:text.rfind("\n") + 1]
            rows = list(csv.DictReader(text.splitlines()))
        if keep_until is not None:
            rows = [r for r in rows if _frame(r) is not None and _frame(r) <= keep_until]
        with atomic_write(self.path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        self.fields = fields


def _frame(row: Mapping[str, str]) -> int | None:
    try:
        return int(float(row.get("frame") or ""))
    except ValueError:
        return None


class Logger:
    """Fan-out of namespaced scalar metrics; ``resumed_at``: the snapshot's frame of a resumed
    run (0 included), whose CSVs and TensorBoard events after it are dropped."""

    def __init__(
        self,
        run_dir: str | Path,
        use_tb: bool = False,
        use_wandb: bool = False,
        wandb_config: Mapping[str, Any] | None = None,
        wandb_project: str = "ellm",
        wandb_name: str | None = None,
        resume_id: str | None = None,
        resumed_at: int | None = None,
        reinit: bool = False,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._csv: dict[str, CsvFile] = {}
        if resumed_at is not None:
            for path in self.run_dir.glob("*.csv"):
                self._csv[path.stem] = CsvFile(path, keep_until=resumed_at)
        self._tb = None
        self._wandb = None
        if use_tb:
            from torch.utils.tensorboard import SummaryWriter

            # Events after the snapshot go, as the CSVs' rows do; those at its frame stay.
            self._tb = SummaryWriter(str(self.run_dir / "tb"),
                                     purge_step=None if resumed_at is None else resumed_at + 1)
        if use_wandb:
            self._wandb = _init_wandb(
                self.run_dir, wandb_config or {}, wandb_project, wandb_name, resume_id, reinit)

    def log(self, metrics: Mapping[str, float], frame: int) -> None:
        """Log scalars with namespaced keys at ``frame`` (env steps so far)."""
        by_namespace: dict[str, dict[str, float]] = defaultdict(dict)
        for key, value in metrics.items():
            namespace, _, name = key.partition("/")
            if not name:
                raise ValueError(f"metric key {key!r} needs a namespace, e.g. 'train/{key}'")
            by_namespace[namespace][name] = float(value)
        for namespace, values in by_namespace.items():
            if namespace not in self._csv:
                self._csv[namespace] = CsvFile(self.run_dir / f"{namespace}.csv")
            self._csv[namespace].write({"frame": frame, **values})
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, float(value), frame)
        if self._wandb is not None:
            try:
                self._wandb.log({k: float(v) for k, v in metrics.items()}, step=frame)
            except Exception as exc:  # noqa: BLE001 - W&B must never stop training
                warnings.warn(f"W&B logging failed ({exc}); W&B is switched off for this run")
                self._wandb = None

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            # An offline run stays on this disk until synced: say how (W&B itself is silenced).
            offline = self._wandb.offline
            sync_dir = self._wandb.settings.sync_dir
            self._wandb.finish()
            self._wandb = None
            if offline:
                log.info("W&B ran offline; upload this run with: wandb sync %s", sync_dir)


def _init_wandb(run_dir, config, project, name, resume_id, reinit=False):
    try:
        import wandb
    except ImportError:
        warnings.warn("use_wandb=True but wandb is not installed (pip install 'ellm[wandb]'); "
                      "W&B logging is off")
        return None
    try:
        return wandb.init(
            project=project, name=name, dir=str(run_dir), config=dict(config),
            id=resume_id, resume="allow" if resume_id else None,
            # Several runs in one process (the Craftax engine's seeds) each keep their own.
            reinit="create_new" if reinit else None,
            settings=wandb.Settings(init_timeout=60, silent=True),
        )
    except Exception as exc:  # noqa: BLE001 - W&B must never stop training
        warnings.warn(f"W&B could not start ({exc}); training goes on without W&B. "
                      "Set WANDB_MODE=offline to log locally without a network.")
        return None
