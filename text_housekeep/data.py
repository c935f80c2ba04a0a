"""Housekeep episodes in the compact format this package ships (``text_housekeep/scenes``, made
by :mod:`text_housekeep.convert`; docs/housekeep.md). Python 3.8-clean, for the habitat bridge."""

from __future__ import annotations

import gzip
import json
import random
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "ellm-text-housekeep-scene/1"
SHUFFLE_SEED = 100
PACKAGE_DATA = Path(__file__).resolve().parent / "scenes"
SUFFIX = ".json.gz"
CM = 100.0  # stored units per metre
# Past this a file is no scene: a small gzip can unpack to gigabytes.
MAX_SCENE_BYTES = 64 * 2**20
_SCENE_KEYS = {"format": str, "scene": str, "split": str, "episode_fields": list,
               "episodes": list, "receptacles": dict, "categories": list, "layouts": list,
               "correct": list, "annotations": dict}


class HousekeepDataError(ValueError):
    """Missing or malformed Housekeep data; the message names the file or the key."""


@dataclass(frozen=True)
class Receptacle:
    """A receptacle; ``footprint`` = (x0, z0, width along x, depth along z) of its top surface in
    metres, from Housekeep's bin packer; ``nav``, a navigable floor point beside it."""

    key: str
    room: str | None
    category: str
    position: tuple[float, float, float]
    nav: tuple[float, float, float]
    footprint: tuple[float, float, float, float]


@dataclass(frozen=True)
class HouseObject:
    """An object of the episode; ``size`` = its footprint (width, depth) in metres."""

    key: str
    category: str
    position: tuple[float, float, float]
    size: tuple[float, float]


@dataclass(frozen=True)
class Episode:
    """One Housekeep episode, its misplaced objects first. ``correct[o]``: the receptacles most
    annotators judged right for ``o``; ``approval[o][r]``: the share who ranked ``r`` tidy."""

    scene: str
    split: str
    episode_id: int
    receptacles: tuple[Receptacle, ...]
    objects: tuple[HouseObject, ...]
    misplaced_count: int
    start: tuple[int, ...]
    correct: tuple[frozenset[int], ...]
    approval: tuple[tuple[float, ...], ...]
    start_position: tuple[float, float, float]
    start_yaw: float  # degrees; forward is -z at 0, turning left increases it
    oracle_steps: int

    @property
    def scene_objects(self) -> tuple[HouseObject, ...]:
        """The objects ELLM puts in the house: only the misplaced ones."""
        return self.objects[: self.misplaced_count]

    def start_matrix(self) -> np.ndarray:
        """Housekeep's ``start_matrix``: [n_receptacles, n_objects], one-hot per column."""
        matrix = np.zeros((len(self.receptacles), len(self.objects)))
        matrix[list(self.start), list(range(len(self.objects)))] = 1.0
        return matrix

    def end_matrix(self) -> np.ndarray:
        """Housekeep's ``end_matrix``: [n_receptacles, n_objects], multi-hot per column."""
        matrix = np.zeros((len(self.receptacles), len(self.objects)))
        for o, recs in enumerate(self.correct):
            matrix[sorted(recs), o] = 1.0
        return matrix


def parse_receptacle_key(key: str) -> tuple[str | None, str]:
    """``"storage_room_0-shelf_23_0.urdf"`` -> ("storage_room_0", "shelf"); room "None" -> None."""
    room, _, rest = key.partition("-")
    category = re.sub(r"(_\d+)*\.urdf$", "", rest)
    return (None if room == "None" else room), category


def room_type(room: str | None) -> str | None:
    return None if room is None else re.sub(r"_\d+$", "", room)


def scene_task(scene: str) -> str:
    """The ``env_spec.housekeep_task`` spelling of a scene."""
    return scene.lower()


def scene_files(data_dir: Path | None = None) -> dict[str, Path]:
    """``{task name: file}`` of the converted scenes in ``data_dir`` (default: shipped data)."""
    directory = Path(data_dir) if data_dir is not None else PACKAGE_DATA
    if not directory.is_dir():
        raise HousekeepDataError(f"Housekeep data directory {directory} does not exist")
    return {scene_task(p.name[: -len(SUFFIX)]): p for p in sorted(directory.glob("*" + SUFFIX))}


def read_json_gz(path: Path, limit: int, what: str) -> Any:
    """The JSON in gzip file ``path``, unpacking at most ``limit`` bytes against gzip bombs."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read(limit + 1)
    except FileNotFoundError:
        raise HousekeepDataError(f"{what} {path} is missing") from None
    except (OSError, EOFError, zlib.error) as err:
        raise HousekeepDataError(f"cannot read {what} {path}: {err}") from None
    if len(raw) > limit:
        raise HousekeepDataError(f"cannot read {what} {path}: it unpacks to over {limit:,} "
                                 "bytes")
    try:
        return json.loads(raw)
    except RecursionError:
        raise HousekeepDataError(f"cannot read {what} {path}: its JSON nests too deep") from None
    except ValueError as err:
        raise HousekeepDataError(f"cannot read {what} {path}: {err}") from None


def read_scene(path: Path) -> dict[str, Any]:
    data = read_json_gz(path, MAX_SCENE_BYTES, "Housekeep scene file")
    found = data.get("format") if isinstance(data, dict) else f"a JSON {type(data).__name__}"
    if found != FORMAT:
        raise HousekeepDataError(
            f"{path} is not a converted Housekeep scene (format {found!r}, expected "
            f"{FORMAT!r}); convert it with `python -m text_housekeep.convert`")
    for key, kind in _SCENE_KEYS.items():
        if not isinstance(data.get(key), kind):
            raise HousekeepDataError(f"{path} is a malformed Housekeep scene: {key} is not a "
                                     f"JSON {'object' if kind is dict else kind.__name__}")
    return data


def find_scene(task: str, data_dir: Path | None = None) -> Path:
    files = scene_files(data_dir)
    key = str(task).lower()
    if key not in files:
        where = data_dir if data_dir is not None else "the shipped data"
        raise HousekeepDataError(
            f"env_spec.housekeep_task={task!r} is not available in {where}; available: "
            f"{', '.join(sorted(files)) or 'none'}. Convert other Housekeep scenes (e.g. Rs_int) "
            "with `python -m text_housekeep.convert` and set env_spec.housekeep_data")
    return files[key]


def shuffled_order(count: int, seed: int = SHUFFLE_SEED) -> list[int]:
    """File indices in the order of ``random.seed(seed); random.shuffle(episodes)``."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order


def episode_count(task: str, data_dir: Path | None = None) -> int:
    return len(read_scene(find_scene(task, data_dir))["episodes"])


def load_episode(task: str, ep_num: int, data_dir: Path | None = None) -> Episode:
    """Episode ``ep_num`` of scene ``task`` after the seed-100 shuffle (HOUSEKEEP.md §1)."""
    path = find_scene(task, data_dir)
    data = read_scene(path)
    count = len(data["episodes"])
    if isinstance(ep_num, bool) or not isinstance(ep_num, int) or not 0 <= ep_num < count:
        raise HousekeepDataError(
            f"env_spec.housekeep_ep_num={ep_num!r} is out of range: scene {data['scene']} has "
            f"{count} episodes (0..{count - 1})")
    return _decoded(path, data, shuffled_order(count)[ep_num])


def load_all(path: Path) -> list[Episode]:
    data = read_scene(path)
    return [_decoded(path, data, i) for i in range(len(data["episodes"]))]


def _decoded(path: Path, data: dict[str, Any], row: int) -> Episode:
    try:
        return episode_from_row(data, row)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError,
            RecursionError) as err:
        raise HousekeepDataError(f"{path} is a malformed Housekeep scene: episode row {row}: "
                                 f"{type(err).__name__}: {err}") from None


def _vec(values: list[int]) -> tuple[float, float, float]:
    return (values[0] / CM, values[1] / CM, values[2] / CM)


def episode_from_row(data: dict[str, Any], row: int) -> Episode:
    """Decode episode ``row`` (file order) of a converted scene (see convert.py for the fields)."""
    fields = dict(zip(data["episode_fields"], data["episodes"][row]))
    recs, cats = data["receptacles"], data["categories"]
    layout = data["layouts"][fields["layout"]]
    receptacles = []
    for u in layout:
        key = recs["keys"][u]
        room, category = parse_receptacle_key(key)
        receptacles.append(Receptacle(
            key=key, room=room, category=category, position=_vec(recs["pos"][u]),
            nav=_vec(recs["nav"][u]), footprint=tuple(v / CM for v in recs["footprint"][u])))
    local = {u: i for i, u in enumerate(layout)}
    objects, start, correct = [], [], []
    for c, suffix, s, pos, size in zip(fields["categories"], fields["suffixes"],
                                       fields["start"], fields["positions"], fields["sizes"]):
        category = cats[c]
        objects.append(HouseObject(key=f"{category}_{suffix}", category=category,
                                   position=_vec(pos), size=(size[0] / CM, size[1] / CM)))
        start.append(local[s])
        correct.append(frozenset(local[u] for u in data["correct"][c] if u in local))
    votes = data["annotations"]
    room_recs = {name: j for j, name in enumerate(votes["room_receptacles"])}
    approval = []
    for c in fields["categories"]:
        row_votes = votes["positive"][c]
        approval.append(tuple(
            row_votes[room_recs[n]] / votes["annotators"] if n in room_recs else 0.0
            for n in (annotation_name(r) for r in receptacles)))
    return Episode(
        scene=data["scene"], split=data["split"], episode_id=fields["id"],
        receptacles=tuple(receptacles), objects=tuple(objects),
        misplaced_count=fields["misplaced"], start=tuple(start), correct=tuple(correct),
        approval=tuple(approval), start_position=_vec(fields["start_position"]),
        start_yaw=fields["yaw"] / 10.0, oracle_steps=fields["oracle_steps"])


def annotation_name(receptacle: Receptacle) -> str:
    """The annotations' name of a receptacle: ``"storage_room|shelf"`` (``"None|window"``)."""
    return f"{room_type(receptacle.room)}|{receptacle.category}"
