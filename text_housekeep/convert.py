"""Convert Housekeep episode files and annotations into the compact scene files this package
ships (the format :mod:`text_housekeep.data` reads).

    python -m text_housekeep.convert path/to/episodes --annotations path/to/annotations \
        --out my_scenes [--license path/to/LICENSE]

``episodes``: Housekeep ``cos_eor_v11_pruned`` files (``<split>/<Scene>.json.gz``) or directories
holding them; ``--annotations``: the directory with ``amt_ranks.npy`` (or the file itself).
Every converted episode is decoded again and its start and end matrices compared with the
original; any difference stops the conversion. Train on the result with
``env_spec.housekeep_data=my_scenes env_spec.housekeep_task=<scene>``.

What is kept per scene: each receptacle once (key, centre, navigable point, top-surface
footprint), the receptacle list of each episode, per object category its correct receptacles
and the annotators' votes; per episode its id, start pose, objects (category, start receptacle,
position, footprint), misplaced count and oracle step count. Dropped: rotations of objects and
receptacles, the bin-packer's internal shelves, the oracle paths (and the mesh paths, already
absent from the redistributable data).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from text_game.pickled import load_npy
from text_housekeep.data import (
    CM,
    FORMAT,
    SUFFIX,
    HousekeepDataError,
    episode_from_row,
    parse_receptacle_key,
    read_json_gz,
    room_type,
)

EPISODE_FIELDS = ("id", "layout", "start_position", "yaw", "misplaced", "oracle_steps",
                  "categories", "suffixes", "start", "positions", "sizes")
# Housekeep's episode file of a scene (1000 episodes) unpacks to about 18 MB.
MAX_EPISODE_FILE_BYTES = 256 * 2**20
SOURCE = ("Housekeep (Kant et al., 2022, 'Housekeep: Tidying Virtual Households using Commonsense "
          "Reasoning', ECCV 2022), cos_eor_v11_pruned episodes and AMT human-preference "
          "annotations; MIT licence (LICENSE.txt)")


def _cm(values: Sequence[float]) -> list[int]:
    return [round(v * CM) for v in values]


def yaw_degrees(quaternion: Sequence[float]) -> float:
    """Heading of a habitat rotation about +y, quaternion [x, y, z, w] -> degrees in [-180, 180)."""
    yaw = math.degrees(2.0 * math.atan2(quaternion[1], quaternion[3]))
    return (yaw + 180.0) % 360.0 - 180.0


def load_annotations(path: Path) -> dict[str, Any]:
    """``amt_ranks.npy``: objects, room_receptacles, ranks [room_recs, objects, annotators]."""
    path = Path(path)
    file = path / "amt_ranks.npy" if path.is_dir() else path
    try:
        # A pickled dict in an object array; read as data, never unpickled (text_game.pickled).
        raw = load_npy(file).item()
        return {"objects": [str(o) for o in raw["objects"]],
                "room_receptacles": [str(r) for r in raw["room_receptacles"]],
                "ranks": np.asarray(raw["ranks"], dtype=np.int64)}
    except FileNotFoundError:
        raise HousekeepDataError(f"annotation file {file} is missing") from None
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as err:
        raise HousekeepDataError(f"cannot read annotations {file}: {err}") from None


def _episode_files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(sorted(path.rglob("*" + SUFFIX)))
        elif path.is_file():
            files.append(path)
        else:
            raise HousekeepDataError(f"episode path {path} does not exist")
    if not files:
        raise HousekeepDataError(f"no *{SUFFIX} episode files under {', '.join(map(str, paths))}")
    return files


def _read_episodes(path: Path) -> list[dict[str, Any]]:
    data = read_json_gz(path, MAX_EPISODE_FILE_BYTES, "Housekeep episode file")
    episodes = data.get("episodes") if isinstance(data, dict) else None
    if not isinstance(episodes, list):
        raise HousekeepDataError(f"{path} is not a Housekeep episode file: expected a JSON "
                                 "object with a list of episodes")
    return episodes


class _SceneBuilder:
    """Accumulates one scene's shared tables while its episodes are encoded."""

    def __init__(self, scene: str, split: str):
        self.scene, self.split = scene, split
        self.rec_index: dict[str, int] = {}
        self.recs: dict[str, list[Any]] = {"keys": [], "pos": [], "nav": [], "footprint": []}
        self.layouts: list[list[int]] = []
        self.categories: dict[str, int] = {}
        self.correct: dict[tuple[int, int], bool] = {}
        self.rows: list[list[Any]] = []

    def _receptacle(self, key: str, pos: Sequence[float], nav: Sequence[float],
                    packer: dict[str, Any]) -> int:
        entry = [_cm(pos), _cm(nav), _cm(list(packer["bottom_left"]) + list(packer["size"]))]
        if key in self.rec_index:
            u = self.rec_index[key]
            known = [self.recs["pos"][u], self.recs["nav"][u], self.recs["footprint"][u]]
            if known != entry:
                raise HousekeepDataError(f"{self.scene}: receptacle {key} moves between episodes")
            return u
        u = self.rec_index[key] = len(self.recs["keys"])
        self.recs["keys"].append(key)
        for name, value in zip(("pos", "nav", "footprint"), entry):
            self.recs[name].append(value)
        return u

    def add(self, ep: dict[str, Any]) -> None:
        layout = [self._receptacle(k, p, n, ep["recs_packers"][k])
                  for k, p, n in zip(ep["recs_keys"], ep["recs_pos"], ep["nav_recs_pos"])]
        if layout not in self.layouts:
            self.layouts.append(layout)
        start = np.asarray(ep["start_matrix"])
        end = np.asarray(ep["end_matrix"])
        sizes = {m["rect"]["id"]: m["rect"]["size"]
                 for packer in ep["recs_packers"].values() for m in packer["matches"]}
        cats, suffixes, starts, positions, footprints = [], [], [], [], []
        for o, (key, category) in enumerate(zip(ep["objs_keys"], ep["objs_cats"])):
            base, _, suffix = key.rpartition("_")
            if base != category or not suffix.isdigit():
                raise HousekeepDataError(f"{self.scene}: object key {key!r} is not "
                                         f"'<category>_<n>' for category {category!r}")
            c = self.categories.setdefault(category, len(self.categories))
            for r, u in enumerate(layout):
                value = bool(end[r, o])
                if self.correct.setdefault((c, u), value) != value:
                    raise HousekeepDataError(
                        f"{self.scene}: episode {ep['episode_id']}: the correct receptacles of "
                        f"{category} differ from another episode's; this format cannot hold it")
            if key not in sizes:
                raise HousekeepDataError(f"{self.scene}: episode {ep['episode_id']}: object "
                                         f"{key} is on no receptacle's packer")
            cats.append(c)
            suffixes.append(int(suffix))
            starts.append(layout[int(np.argmax(start[:, o]))])
            positions.append(_cm(ep["objs_pos"][o]))
            footprints.append(_cm(sizes[key]))
        self.rows.append([
            ep["episode_id"], self.layouts.index(layout), _cm(ep["start_position"]),
            round(yaw_degrees(ep["start_rotation"]) * 10), int(ep["misplaced_count"]),
            int(ep.get("oracle_steps_solve") or 0), cats, suffixes, starts, positions,
            footprints])

    def build(self, annotations: dict[str, Any]) -> dict[str, Any]:
        categories = sorted(self.categories, key=self.categories.get)
        correct = [sorted(u for (c2, u), ok in self.correct.items() if c2 == c and ok)
                   for c in range(len(categories))]
        return {
            "format": FORMAT, "scene": self.scene, "split": self.split, "source": SOURCE,
            "receptacles": self.recs, "layouts": self.layouts, "categories": categories,
            "correct": correct, "annotations": self._votes(categories, annotations),
            "episode_fields": list(EPISODE_FIELDS), "episodes": self.rows,
        }

    def _votes(self, categories: list[str], annotations: dict[str, Any]) -> dict[str, Any]:
        """Per category, how many annotators ranked each of the scene's room-receptacle types a
        tidy place (rank > 0); only pairs the annotations cover."""
        names = sorted({f"{room_type(parse_receptacle_key(k)[0])}|{parse_receptacle_key(k)[1]}"
                        for k in self.recs["keys"]} & set(annotations["room_receptacles"]))
        ranks = annotations["ranks"]
        rows = []
        for category in categories:
            if category not in annotations["objects"]:
                rows.append([0] * len(names))
                continue
            o = annotations["objects"].index(category)
            rows.append([int((ranks[annotations["room_receptacles"].index(n), o] > 0).sum())
                         for n in names])
        return {"room_receptacles": names, "positive": rows, "annotators": int(ranks.shape[2])}


def convert_file(path: Path, annotations: dict[str, Any], split: str | None = None
                 ) -> dict[str, Any]:
    """One Housekeep episode file -> one compact scene (verified, see :func:`verify`)."""
    episodes = _read_episodes(path)
    if not episodes:
        raise HousekeepDataError(f"{path} holds no episodes")
    scene = path.name[: -len(SUFFIX)]
    builder = _SceneBuilder(scene, split or path.parent.name)
    for ep in episodes:
        try:
            builder.add(ep)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
            name = ep.get("episode_id") if isinstance(ep, dict) else repr(ep)[:40]
            raise HousekeepDataError(
                f"{path}: episode {name} lacks a field or is malformed: "
                f"{type(err).__name__}: {err}") from None
    data = builder.build(annotations)
    verify(data, episodes)
    return data


def verify(data: dict[str, Any], episodes: Sequence[dict[str, Any]]) -> None:
    """Decode every episode and compare its mappings and names with the original."""
    for row, ep in enumerate(episodes):
        decoded = episode_from_row(data, row)
        same = (decoded.episode_id == ep["episode_id"]
                and [r.key for r in decoded.receptacles] == list(ep["recs_keys"])
                and [o.key for o in decoded.objects] == list(ep["objs_keys"])
                and np.array_equal(decoded.start_matrix(), np.asarray(ep["start_matrix"]))
                and np.array_equal(decoded.end_matrix(), np.asarray(ep["end_matrix"])))
        if not same:
            raise HousekeepDataError(
                f"{data['scene']}: episode {ep['episode_id']} does not survive the round trip")


def agreement(data: dict[str, Any]) -> float:
    """Fraction of annotated (category, receptacle) cells where "correct" == "at least 6 of
    10 annotators ranked it a tidy place" (Housekeep's README reports 99.46%)."""
    votes = data["annotations"]
    index = {n: j for j, n in enumerate(votes["room_receptacles"])}
    hits = total = 0
    for c, correct in enumerate(data["correct"]):
        for u, key in enumerate(data["receptacles"]["keys"]):
            room, category = parse_receptacle_key(key)
            j = index.get(f"{room_type(room)}|{category}")
            if j is None:
                continue
            total += 1
            hits += (votes["positive"][c][j] * 10 >= 6 * votes["annotators"]) == (u in correct)
    return hits / total if total else float("nan")


def write_scene(data: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{data['scene']}{SUFFIX}"
    tmp = path.with_name(path.name + ".tmp")
    text = json.dumps(data, separators=(",", ":"))
    with gzip.GzipFile(tmp, "wb", compresslevel=9, mtime=0) as f:  # reproducible bytes
        f.write(text.encode("utf-8"))
    tmp.replace(path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m text_housekeep.convert",
        description="Convert Housekeep episode files + annotations to Text-Housekeep scene files.")
    parser.add_argument("episodes", nargs="+", type=Path,
                        help="episode files (<split>/<Scene>.json.gz) or directories of them")
    parser.add_argument("--annotations", required=True, type=Path,
                        help="directory holding amt_ranks.npy (or the file)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--license", type=Path, default=None,
                        help="Housekeep's LICENSE file, copied to <out>/LICENSE.txt")
    parser.add_argument("--split", default=None,
                        help="split name (default: the episode file's directory name)")
    args = parser.parse_args(argv)
    try:
        annotations = load_annotations(args.annotations)
        files = _episode_files(args.episodes)
        print(f"{'scene':<20} {'split':<6} {'episodes':>8} {'recs':>5} {'KB':>6} {'agree':>7}")
        for path in files:
            data = convert_file(path, annotations, args.split)
            out = write_scene(data, args.out)
            print(f"{data['scene']:<20} {data['split']:<6} {len(data['episodes']):>8} "
                  f"{len(data['receptacles']['keys']):>5} {out.stat().st_size / 1024:>6.1f} "
                  f"{agreement(data):>7.2%}")
        if args.license is not None:
            shutil.copyfile(args.license, args.out / "LICENSE.txt")
    except (HousekeepDataError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} scene file(s) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
