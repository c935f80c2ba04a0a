"""No file a user can be handed is ever unpickled: the source tree holds no unpickling call,
and the two pickle-format files we read (Housekeep's annotations, the original's LM cache) are
decoded as data by :mod:`text_game.pickled`, which refuses anything that would run code."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import numpy as np
import pytest

from text_game.pickled import PickleDataError, load_npy, loads
from text_housekeep.convert import load_annotations
from text_housekeep.data import HousekeepDataError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("ellm", "baselines", "text_game", "text_crafter", "text_housekeep", "llm_in_the_loop",
           "scripts", "train.py")
UNPICKLERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve",
              "marshal", "jsonpickle"}


def _keyword(call: ast.Call, name: str) -> object:
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def unpickling_calls(path: Path) -> list[str]:
    """Every place of ``path`` that could unpickle: an import of a pickle module, np.load
    without allow_pickle=False, torch.load without weights_only=True, read_pickle."""
    found = []
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            found += [f"{where} imports {n}" for n in names if n.split(".")[0] in UNPICKLERS]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner_name = owner.id if isinstance(owner, ast.Name) else ""
            attr = node.func.attr
            if attr == "load" and owner_name in ("np", "numpy") and _keyword(
                    node, "allow_pickle") is not False:
                found.append(f"{where} np.load without allow_pickle=False")
            elif attr == "load" and owner_name == "torch" and _keyword(
                    node, "weights_only") is not True:
                found.append(f"{where} torch.load without weights_only=True")
            elif attr in ("read_pickle", "Unpickler"):
                found.append(f"{where} {attr}")
    return found


def test_no_source_file_unpickles():
    files = [p for name in SOURCES for p in
             ([ROOT / name] if name.endswith(".py") else sorted((ROOT / name).rglob("*.py")))]
    assert len(files) > 100
    found = [f for path in files for f in unpickling_calls(path)]
    assert not found, "\n".join(found)


def test_the_scan_finds_each_kind_of_unpickling(tmp_path):
    bad = tmp_path / "sample.py"
    bad.write_text("import pickle\nimport numpy as np\nimport torch\nnp.load('a')\n"
                   "np.load('a', allow_pickle=True)\ntorch.load('b')\n"
                   "torch.load('b', weights_only=False)\nnp.load('c', allow_pickle=False)\n"
                   "torch.load('d', weights_only=True)\n")
    found = unpickling_calls(bad)
    assert len(found) == 5, found


class _Marker:
    """Unpickled, it would create ``path``: the proof that code ran."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_round_trips_in_every_protocol(protocol):
    data = {("engine", "prompt", 200, 0.1, None): "- chop tree", "list": [1, 2.5, True, None],
            "bytes": b"\x00\xff", "set": {1, 2}, "frozen": frozenset({3}), "big": 2 ** 80,
            "array": np.arange(6, dtype=">i4").reshape(2, 3),
            "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
            "objects": np.array([{"a": 1}, "x"], dtype=object)}
    out = loads(pickle.dumps(data, protocol=protocol))
    assert out["list"] == data["list"] and out["bytes"] == data["bytes"]
    assert out["set"] == {1, 2} and out["frozen"] == frozenset({3}) and out["big"] == 2 ** 80
    assert out[("engine", "prompt", 200, 0.1, None)] == "- chop tree"
    for key in ("array", "fortran"):
        assert out[key].dtype == data[key].dtype and np.array_equal(out[key], data[key])
    assert out["objects"][0] == {"a": 1} and out["objects"][1] == "x"


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_code_in_a_pickle_never_runs(tmp_path, protocol):
    marker = tmp_path / "ran"
    payload = pickle.dumps({"x": [_Marker(marker)]}, protocol=protocol)
    with pytest.raises(PickleDataError, match="refusing (__builtin__.getattr|builtins.getattr|pathlib)"):
        loads(payload)
    assert not marker.exists()


@pytest.mark.parametrize("payload", [
    b"\x80\x04cos\nsystem\n(S'true'\ntR.",  # GLOBAL + REDUCE
    b"(cos\nsystem\nS'true'\ni.",  # INST
    b"\x80\x02cbuiltins\nobject\n)\x81.",  # NEWOBJ
    b"\x80\x04P0\n.",  # a persistent id
    b"\x80\x04\x82\x01.",  # EXT1
    b"\x80\x04]\x94(K\x01K\x02e",  # no STOP
    b"garbage",
])
def test_every_opcode_that_calls_or_is_malformed_is_refused(payload):
    with pytest.raises(PickleDataError):
        loads(payload)


def test_a_pickle_that_reuses_one_list_stays_small():
    inner: list = [0]
    for _ in range(3):
        inner = [inner] * 10
    out = loads(pickle.dumps(inner, protocol=4))
    assert out[0] is out[1]  # shared, not copied out


# A 152-byte pickle: a dict whose one key is a tuple of a tuple of ... (70 levels), each level
# the level below twice (DUP, TUPLE2): 2^70 nodes to hash.
SHARED_TUPLE_KEY = b"\x80\x02})" + b"2\x86" * 70 + b"X\x01\x00\x00\x00as."


@pytest.mark.parametrize(("case", "message"), [
    ("hashed", "reading it visits over 50,000,000 items"),
    ("walked", "it holds over 10,000,000 items once its shared references are counted"),
    ("deep", "it nests deeper than 100 levels"),
])
def test_data_that_shared_references_make_huge_or_deep_is_refused_at_once(case, message):
    if case == "hashed":
        payload = SHARED_TUPLE_KEY
    elif case == "walked":  # each level references the level below 10 times: 10^30 leaves
        inner: list = [0]
        for _ in range(30):
            inner = [inner] * 10
        payload = pickle.dumps(inner, protocol=4)
    else:
        deep: list = []
        for _ in range(150):
            deep = [deep]
        payload = pickle.dumps(deep, protocol=4)
    with pytest.raises(PickleDataError, match=message):
        loads(payload)


def test_housekeep_annotations_load_without_pickle(tmp_path):
    annotations = ROOT / "tests" / "data" / "housekeep" / "annotations" / "amt_ranks.npy"
    ours = load_npy(annotations).item()
    numpy = np.load(annotations, allow_pickle=True).item()  # the reference, on our own file
    assert [str(o) for o in ours["objects"]] == [str(o) for o in numpy["objects"]]
    assert np.array_equal(ours["ranks"], numpy["ranks"])
    assert load_annotations(annotations)["ranks"].shape == numpy["ranks"].shape
    plain = tmp_path / "plain.npy"
    np.save(plain, np.arange(4))
    assert np.array_equal(load_npy(plain), np.arange(4))


def test_crafted_housekeep_annotations_run_no_code(tmp_path):
    marker = tmp_path / "ran"
    crafted = tmp_path / "amt_ranks.npy"
    np.save(crafted, np.array({"objects": [], "room_receptacles": [], "ranks": _Marker(marker)},
                              dtype=object), allow_pickle=True)
    with pytest.raises(HousekeepDataError, match=r"cannot read annotations .*refusing"):
        load_annotations(crafted)
    assert not marker.exists()
