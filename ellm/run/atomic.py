"""Files written so that a crash or a kill leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ellm.loop import interrupt


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb", *, tmp: Path | None = None,
                 sync_dir: bool = False, **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Write ``path`` atomically (temp file, fsync, rename); on an exception it is left as it was.
    The temp file is always a new file, never written through a link found at its name."""
    path = Path(path)
    tmp = tmp or path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with interrupt.deferred():
        try:
            tmp.unlink(missing_ok=True)  # a crash's leftover, or a link planted at the name
            with open(tmp, mode, opener=_new_file, **open_kwargs) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    if sync_dir:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _new_file(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)


def write_text(path: str | Path, text: str) -> None:
    """``text`` (UTF-8) into ``path`` atomically; a symlink at ``path`` is replaced by the file,
    never written through."""
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(text)


__all__ = ["atomic_write", "write_text"]
