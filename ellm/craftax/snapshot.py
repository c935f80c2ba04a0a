"""The Craftax engine's snapshot: every array the loop carries and the goal table, in one ``.npz``
written atomically, read without pickle and checked against a fresh run's arrays."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ellm.run.atomic import atomic_write
from ellm.run.checkpoint import CheckpointError

SNAPSHOT = "snapshot.npz"
# The record keys a resumed run must share with its snapshot: they fix the arrays' meaning.
SAME = ("method", "engine", "goal_source", "seeds_trained_together", "craftax", "env_spec.name",
        "env_spec.length", "discount")
MAX_META = 1 << 20


def _get(record: dict[str, Any], dotted: str) -> Any:
    node: Any = record
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def save_snapshot(path: Path, states, frame: int, record: dict[str, Any],
                  extra: dict[str, Any]) -> None:
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(states)]
    arrays = {f"leaf_{i:04d}": leaf for i, leaf in enumerate(leaves)}
    scalars = {k: v for k, v in extra.items() if not isinstance(v, np.ndarray)}
    arrays.update({f"extra_{k}": v for k, v in extra.items() if isinstance(v, np.ndarray)})
    meta = {"frame": int(frame), "leaves": len(leaves), "record": record, "extra": scalars}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with atomic_write(path, "wb") as f:
        f.write(buffer.getvalue())


def load_snapshot(path: Path, template, record: dict[str, Any]):
    """(states, frame, extra) at ``path``; CheckpointError naming it when it does not fit."""
    leaves, treedef = jax.tree_util.tree_flatten(template)
    expected = sum(np.asarray(x).nbytes for x in leaves)
    try:
        if path.stat().st_size > 2 * expected + (64 << 20):
            raise CheckpointError(f"{path}: {path.stat().st_size} bytes, far more than a Craftax "
                                  f"snapshot of this config ({expected} bytes of arrays)")
        with np.load(path, allow_pickle=False) as data:
            meta_bytes = data["meta"]
            if meta_bytes.size > MAX_META:
                raise CheckpointError(f"{path}: its metadata is over {MAX_META} bytes")
            meta = json.loads(meta_bytes.tobytes().decode())
            arrays = [data[f"leaf_{i:04d}"] for i in range(len(leaves))]
            extra = dict(meta.get("extra", {}))
            extra.update({k[len("extra_"):]: data[k] for k in data.files
                          if k.startswith("extra_")})
    except CheckpointError:
        raise
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is not a Craftax snapshot (a .npz written by a Craftax "
                              f"run): {err}") from None
    frame = meta.get("frame")
    if not (isinstance(frame, int) and 0 <= frame <= 2**40) or meta.get("leaves") != len(leaves):
        raise CheckpointError(f"{path}: its metadata does not describe a Craftax snapshot")
    for key in SAME:
        if _get(meta.get("record", {}), key) != _get(record, key):
            raise CheckpointError(
                f"{path} was written by a run with {key}={_get(meta.get('record', {}), key)!r}; "
                f"this run has {key}={_get(record, key)!r}: resume with the same value")
    for i, (want, got) in enumerate(zip(leaves, arrays, strict=True)):
        want = np.asarray(want)
        if got.shape != want.shape or got.dtype != want.dtype:
            raise CheckpointError(f"{path}: array {i} is {got.dtype}{list(got.shape)}, this "
                                  f"config needs {want.dtype}{list(want.shape)}")
    states = jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(a) for a in arrays])
    return states, frame, extra


def snapshot_file(path: str | Path, key: str = "snapshot_path") -> Path:
    """The ``.npz`` a run dir or file names; CheckpointError naming ``key`` when there is none."""
    path = Path(path).expanduser()
    found = path / SNAPSHOT if path.is_dir() else path
    if not found.is_file():
        raise CheckpointError(f"{key}={path}: no Craftax snapshot there (expected a Craftax run "
                              f"dir holding {SNAPSHOT}, or the file itself)")
    return found


def _members(path: Path) -> dict[str, int]:
    """Each member's uncompressed size: what loading it would cost, read before loading."""
    try:
        with zipfile.ZipFile(path) as z:
            return {info.filename.removesuffix(".npy"): info.file_size for info in z.infolist()}
    except (OSError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"{path} is not a Craftax snapshot (a .npz written by a Craftax "
                              f"run): {err}") from None


def read_meta(path: Path) -> dict[str, Any]:
    """The snapshot's metadata (frame, record) without loading its arrays."""
    if _members(path).get("meta", MAX_META + 1) > MAX_META + 256:
        raise CheckpointError(f"{path}: no metadata of at most {MAX_META} bytes")
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(data["meta"].tobytes().decode())
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is not a Craftax snapshot: {err}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("record"), dict):
        raise CheckpointError(f"{path}: its metadata does not describe a Craftax snapshot")
    return meta


def leaf_shape(path: Path, index: int) -> tuple[int, ...]:
    """The shape of the snapshot's array ``index``, read from its header alone."""
    try:
        with zipfile.ZipFile(path) as z, z.open(f"leaf_{index:04d}.npy") as f:
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            return tuple(read(f)[0])
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"{path} is not a Craftax snapshot: {err}") from None


def load_params(path: Path, template, seeds: tuple[int, ...], trained: list[int]):
    """The network weights of ``seeds`` in the snapshot at ``path``, whose seeds were
    ``trained``; ``template`` is this run's (seed-stacked) weights, whose shapes they must have.
    The weights are the snapshot's first leaves: they lead the state it flattened."""
    leaves, treedef = jax.tree_util.tree_flatten(template)
    missing = [s for s in seeds if s not in trained]
    if missing:
        raise CheckpointError(f"{path} holds seeds {trained}, not {missing}: finetune the seeds "
                              "it trained (seed=, seeds=)")
    rows = np.array([trained.index(s) for s in seeds])
    sizes = _members(path)
    out = []
    with np.load(path, allow_pickle=False) as data:
        for i, want in enumerate(leaves):
            name, shape = f"leaf_{i:04d}", (len(trained), *np.shape(want)[1:])
            nbytes = int(np.prod(shape)) * np.asarray(want).dtype.itemsize
            if sizes.get(name, nbytes + 4097) > nbytes + 4096:
                raise CheckpointError(f"{path}: its weights do not fit this config's network "
                                      f"(array {i} is missing or larger than {list(shape)}); "
                                      "finetune with the pretrained run's craftax.hidden and "
                                      "craftax.layers")
            got = data[name]
            if got.shape != shape or got.dtype != np.asarray(want).dtype:
                raise CheckpointError(f"{path}: weight array {i} is {got.dtype}{list(got.shape)}, "
                                      f"this config's network needs {np.asarray(want).dtype}"
                                      f"{list(shape)}; finetune with the pretrained run's "
                                      "craftax.hidden and craftax.layers")
            out.append(jax.numpy.asarray(got[rows]))
    return jax.tree_util.tree_unflatten(treedef, out)
