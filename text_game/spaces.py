"""``TextField``: a Text space that may hold None (an empty LLF field) in shared memory that
AsyncVectorEnv reads live, where gymnasium's own Text holds no None and is read only once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from multiprocessing.sharedctypes import SynchronizedArray
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import shared_memory as shared


class TextField(gym.spaces.Text):

    def __init__(self, max_length: int, *, optional: bool = False, **kwargs: Any) -> None:
        super().__init__(max_length, **kwargs)
        self.optional = optional

    def contains(self, x: Any) -> bool:
        return (self.optional and x is None) or super().contains(x)

    def __repr__(self) -> str:
        return f"{'Optional' if self.optional else ''}{super().__repr__()}"

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other) and getattr(other, "optional", False) == self.optional

    __hash__ = None  # type: ignore[assignment]  # as gymnasium's spaces: mutable (seeded)


class SharedTexts(Sequence):

    def __init__(self, space: TextField, rows: np.ndarray) -> None:
        self.space, self.rows = space, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row, chars = self.rows[index], self.space.character_list
        return None if row[0] else "".join(chars[v] for v in row[1:] if v < len(chars))

    def __iter__(self) -> Iterator[str | None]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __deepcopy__(self, memo: dict) -> tuple[str | None, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


def _rows(space: TextField, memory: SynchronizedArray, n: int) -> np.ndarray:
    return np.frombuffer(memory.get_obj(), dtype=np.int32).reshape((n, space.max_length + 1))


@shared.create_shared_memory.register(TextField)
def _create(space: TextField, n: int = 1, ctx: ModuleType = shared.mp) -> SynchronizedArray:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@shared.write_to_shared_memory.register(TextField)
def _write(space: TextField, index: int, value: str | None, memory: SynchronizedArray) -> None:
    row = _rows(space, memory, len(memory) // (space.max_length + 1))[index]
    if value is None:
        row[0], row[1:] = 1, len(space.character_set)  # past the charset: no character
    else:
        row[0], row[1:] = 0, gym.spaces.flatten(space, value)


@shared.read_from_shared_memory.register(TextField)
def _read(space: TextField, memory: SynchronizedArray, n: int = 1) -> SharedTexts:
    return SharedTexts(space, _rows(space, memory, n))


__all__ = ["SharedTexts", "TextField"]
