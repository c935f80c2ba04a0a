"""An append-only table of strings, so replay stores a text as one int32 id instead of tokens."""

from __future__ import annotations

import json
import os
from pathlib import Path


class StringTable:
    """Append-only id <-> string table persisted as JSON lines; id 0 is ``""``.

    Each new string is flushed at once and ``sync`` runs before an episode file is written, so a
    stored episode never refers to a string that is not on disk.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._strings: list[str] = [""]
        self._ids: dict[str, int] = {"": 0}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self._load()
        self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for appends, see close()

    def _load(self) -> None:
        data = self.path.read_bytes()
        complete_end = data.rfind(b"\n") + 1
        for lineno, line in enumerate(data[:complete_end].split(b"\n")[:-1], start=1):
            try:
                s = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{self.path}:{lineno}: corrupt string table line {line!r}") from e
            if not isinstance(s, str):
                raise ValueError(  # noqa: TRY004
                    f"{self.path}:{lineno}: expected a JSON string, got {line!r}")
            self._ids.setdefault(s, len(self._strings))
            self._strings.append(s)
        if complete_end < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(complete_end)

    def id(self, s: str) -> int:
        """The id of ``s``, adding it (and writing it to the file) if it is new."""
        i = self._ids.get(s)
        if i is not None:
            return i
        if not isinstance(s, str):
            raise TypeError(f"StringTable holds str, got {type(s).__name__}: {s!r}")
        self._file.write(json.dumps(s, ensure_ascii=False).encode("utf-8") + b"\n")
        self._file.flush()
        i = len(self._strings)
        self._strings.append(s)
        self._ids[s] = i
        return i

    def __getitem__(self, i: int) -> str:
        if i < 0:
            raise IndexError(f"string id {i} is negative")
        return self._strings[i]

    def __len__(self) -> int:
        return len(self._strings)

    def __contains__(self, s: object) -> bool:
        return s in self._ids

    def sync(self) -> None:
        """Flush and fsync the file, so every id handed out so far survives a power loss."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()
