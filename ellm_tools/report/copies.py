"""Copies of runs' records that outlive the run directories (``--copy-runs``), and the report's
own output folder: neither ever writes through a symlink or replaces what it did not write."""

from __future__ import annotations

import filecmp
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from ellm_tools.report.runs import Run, inside


class UnsafeOutput(ValueError):
    """An output folder the report will not write into: a symlink, or not a directory."""


# What a copied run keeps: the files the report reads, small enough to commit. Snapshots,
# replay episodes and train.log (which names the machine's paths) stay behind.
RECORD_FILES: tuple[str, ...] = ("config.json", "*.csv", "train/stats.jsonl", "eval/stats.jsonl")


def output_dir(path: str | Path) -> Path:
    """``path`` made a directory for the report to write into; a symlink or a file is refused."""
    path = Path(path)
    if path.is_symlink():
        raise UnsafeOutput(f"{str(path)!r} is a symlink: the report writes only into a directory "
                           "of its own (remove the link, or choose another --out)")
    if path.exists() and not path.is_dir():
        raise UnsafeOutput(f"{str(path)!r} is a file: expected a directory for the report")
    path.mkdir(parents=True, exist_ok=True)
    return path


def copy_records(runs: Iterable[Run], dest: str | Path) -> list[Path]:
    """Copy each run's records into a new ``dest/<method>_seed<k>``, so that a report can be
    rebuilt once the run directories are gone; nothing under ``dest`` is replaced or deleted."""
    dest = output_dir(dest)
    runs = list(runs)
    kept = {id(r) for r in runs if dest.resolve() in r.path.resolve().parents}
    # Copies already under dest keep their names whatever the order the runs came in.
    taken = {r.path.name for r in runs if id(r) in kept}
    copies: list[Path] = []
    for run in runs:
        if id(run) in kept:
            copies.append(run.path)
            continue
        stem = safe_name(run.method)
        stem = f"{stem}_seed{run.seed}" if run.seed is not None else stem
        name, n = stem, 2
        while name in taken or (_exists(dest / name) and not _same_records(run.path,
                                                                            dest / name)):
            name, n = f"{stem}_{n}", n + 1
        taken.add(name)
        target = dest / name
        assert target.parent == dest and name not in ("", ".", ".."), name
        if not _exists(target):
            target.mkdir()  # new, so every file below it is one this call writes
            for relative, source in _records(run.path).items():
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target / relative, follow_symlinks=False)
        copies.append(target)
    return copies


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _records(run_dir: Path) -> dict[Path, Path]:
    return {source.relative_to(run_dir): source for pattern in RECORD_FILES
            for source in sorted(run_dir.glob(pattern)) if inside(run_dir, source)}


def _same_records(run_dir: Path, copy: Path) -> bool:
    """``copy`` is a directory (not a link) holding exactly the run's records, unchanged."""
    if copy.is_symlink() or not copy.is_dir():
        return False
    mine, theirs = _records(run_dir), _records(copy)
    return mine.keys() == theirs.keys() and all(
        filecmp.cmp(mine[k], theirs[k], shallow=False) for k in mine)


def safe_name(label: str, limit: int = 80) -> str:
    """A directory name made from a run's label (its records' words), never starting with a dot."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", label)[:limit].strip(".-")
    return name or "run"
