"""Text-Housekeep: converter round trip, episode choice, the symbolic backend, the text layer,
ELLM's Housekeep goals and rewards, the habitat bridge protocol, and tiny end-to-end runs of the
original README's Housekeep commands."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import csv_rows, find_run, run_train
from hydra import compose, initialize_config_dir

import text_housekeep as th
from ellm.games.housekeep.goals import (
    AnswerRecord,
    GroundTruthAnswers,
    HousekeepGoalReward,
    HousekeepGoals,
    HousekeepSuggester,
    answer_metrics,
    yes_no_prompt,
)
from ellm.reward import StepData
from ellm.run.config import ConfigError, validate
from text_housekeep import convert
from text_housekeep.backend import BackendError
from text_housekeep.bridge import ProcessBackend, habitat_backend
from text_housekeep.data import (
    MAX_SCENE_BYTES,
    Episode,
    HouseObject,
    Receptacle,
    annotation_name,
    load_all,
    load_episode,
    parse_receptacle_key,
    scene_files,
)
from text_housekeep.env import HousekeepTextEnv
from text_housekeep.shelves import ShelfPacker
from text_housekeep.symbolic import SymbolicBackend
from text_housekeep.text import text_observation

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "housekeep"
RAW = FIXTURE / "episodes" / "train" / "Pomaria_2_int.json.gz"
SHIPPED = {"beechwood_1_int", "benevolence_1_int", "benevolence_2_int", "ihlen_0_int",
           "ihlen_1_int", "merom_0_int", "merom_1_int", "pomaria_0_int", "pomaria_2_int"}


def raw_episodes() -> list[dict]:
    with gzip.open(RAW, "rt") as f:
        return json.load(f)["episodes"]


# ---------------------------------------------------------------------------- data
def test_shipped_data_lists_the_nine_scenes_with_licence_and_citation():
    data = ROOT / "text_housekeep" / "scenes"
    assert set(scene_files()) == SHIPPED
    assert "MIT License" in (data / "LICENSE.txt").read_text()
    assert "Kant" in (data / "README.txt").read_text()
    assert sum(p.stat().st_size for p in data.glob("*.json.gz")) < 600_000
    assert th.DEFAULT_TASK in SHIPPED


def test_converter_round_trip_matches_the_episode_matrices(tmp_path):
    code = convert.main([str(FIXTURE / "episodes"), "--annotations", str(FIXTURE / "annotations"),
                         "--out", str(tmp_path), "--license", str(FIXTURE / "LICENSE")])
    assert code == 0
    assert "MIT License" in (tmp_path / "LICENSE.txt").read_text()
    raw = raw_episodes()
    fresh = load_all(tmp_path / "Pomaria_2_int.json.gz")
    shipped = {ep.episode_id: ep for ep in load_all(scene_files()["pomaria_2_int"])}
    for original, converted in zip(raw, fresh, strict=True):
        for ep in (converted, shipped[original["episode_id"]]):
            assert ep.episode_id == original["episode_id"]
            assert [r.key for r in ep.receptacles] == original["recs_keys"]
            assert [o.key for o in ep.objects] == original["objs_keys"]
            assert ep.misplaced_count == int(original["misplaced_count"])
            np.testing.assert_array_equal(ep.start_matrix(), np.array(original["start_matrix"]))
            np.testing.assert_array_equal(ep.end_matrix(), np.array(original["end_matrix"]))
            np.testing.assert_allclose(ep.start_position, original["start_position"], atol=0.006)
    # the annotators' votes survive: approval = share of the 10 annotators ranking it positive
    ranks = np.load(FIXTURE / "annotations" / "amt_ranks.npy", allow_pickle=True).item()
    ep = fresh[0]
    o, r = 0, ep.start[0]
    name = annotation_name(ep.receptacles[r])
    assert name in list(ranks["room_receptacles"])
    votes = ranks["ranks"][list(ranks["room_receptacles"]).index(name),
                           list(ranks["objects"]).index(ep.objects[o].category)]
    assert ep.approval[o][r] == pytest.approx((votes > 0).sum() / 10)


def test_converter_reports_missing_input(tmp_path, capsys):
    code = convert.main([str(tmp_path / "nope"), "--annotations", str(FIXTURE / "annotations"),
                         "--out", str(tmp_path / "out")])
    assert code == 2 and "nope" in capsys.readouterr().err


def test_ep_num_follows_the_seed_100_shuffle():
    episodes = load_all(scene_files()["pomaria_2_int"])
    random.seed(100)
    random.shuffle(episodes)  # exactly what the original does with the scene's episode list
    for ep_num in (0, 1, 2, 8, 12, 14, 999):
        assert load_episode("pomaria_2_int", ep_num).episode_id == episodes[ep_num].episode_id
    assert load_episode("Pomaria_2_int", 0).episode_id == 342  # case-insensitive scene name
    # the raw file holds episode ids in file order: 342 and 471 are ep_num 0 and 1
    assert [e["episode_id"] for e in raw_episodes()] == [0, 1, 342, 471]
    assert load_episode("pomaria_2_int", 1).episode_id == 471


@pytest.mark.parametrize("task, ep_num, message", [
    ("rs_int", 0, "env_spec.housekeep_task='rs_int' is not available"),
    ("pomaria_2_int", 1000, "env_spec.housekeep_ep_num=1000 is out of range"),
    ("pomaria_2_int", -1, "env_spec.housekeep_ep_num=-1 is out of range"),
])
def test_bad_episode_choice_names_the_key(task, ep_num, message):
    with pytest.raises(th.HousekeepDataError, match=message):
        load_episode(task, ep_num)


# ---------------------------------------------------------------------------- crafted files
def crafted_scene(directory: Path, case: str) -> Path:
    """A file in ``directory`` named as scene ``crafted`` that is no sound scene."""
    path = directory / "crafted.json.gz"
    if case == "bomb":  # 65 MiB of spaces in a 64 KiB gzip
        with gzip.open(path, "wb", compresslevel=1) as f:
            for _ in range(MAX_SCENE_BYTES // 2**20 + 1):
                f.write(b" " * 2**20)
        return path
    shipped = json.loads(gzip.decompress(scene_files()["pomaria_2_int"].read_bytes()))
    if case == "row":
        shipped["episodes"] = [[1, 2]] * len(shipped["episodes"])
    data = {"list": [shipped], "deep": None, "fields": {**shipped, "episodes": "x"},
            "row": shipped}[case]
    text = "[" * 100_000 + "]" * 100_000 if case == "deep" else json.dumps(data)
    path.write_bytes(gzip.compress(text.encode()))
    return path


@pytest.mark.e2e
@pytest.mark.parametrize(("case", "why"), [
    ("list", "is not a converted Housekeep scene (format 'a JSON list'"),
    ("deep", "its JSON nests too deep"),
    ("bomb", f"it unpacks to over {MAX_SCENE_BYTES:,} bytes"),
    ("fields", "is a malformed Housekeep scene: episodes is not a JSON list"),
    ("row", "is a malformed Housekeep scene: episode row"),
])
def test_a_crafted_scene_file_is_refused_naming_it_and_its_cli_exits_2(tmp_path, case, why):
    path = crafted_scene(tmp_path, case)
    with pytest.raises(th.HousekeepDataError) as refused:
        load_episode("crafted", 0, tmp_path)
    assert str(path) in str(refused.value) and why in str(refused.value)
    proc = subprocess.run([sys.executable, "-m", "text_housekeep.bridge", "--task", "crafted",
                           "--data", str(tmp_path)], capture_output=True, text=True,
                          check=False, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [f"error: {refused.value}"]


@pytest.mark.e2e
@pytest.mark.parametrize(("text", "why"), [
    ("[1, 2]", "is not a Housekeep episode file: expected a JSON object with a list"),
    ("[" * 100_000 + "]" * 100_000, "its JSON nests too deep"),
    ('{"episodes": [1]}', "episode 1 lacks a field or is malformed"),
])
def test_a_crafted_episode_file_stops_the_converter_with_one_line(tmp_path, text, why):
    episodes = tmp_path / "train" / "Pomaria_2_int.json.gz"
    episodes.parent.mkdir()
    episodes.write_bytes(gzip.compress(text.encode()))
    proc = subprocess.run([sys.executable, "-m", "text_housekeep.convert", str(episodes),
                           "--annotations", str(FIXTURE / "annotations"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, check=False,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: ") and str(episodes) in line and why in line


# ---------------------------------------------------------------------------- scripted episode
def scripted():
    env = th.make("pomaria_2_int", 0, action_mode="highlevel")
    source = HousekeepGoals(HousekeepSuggester(GroundTruthAnswers()))
    paid = HousekeepGoalReward()
    obs, info = env.reset()
    goals = source.reset(obs, info)

    def act(name: str):
        obs, game, _, _, info = env.step(env.action_names.index(name))
        reward, achieved = paid.step(StepData(0, game, info, source.goals))
        return obs, game, reward, source.observe(obs, info, [achieved] if achieved else []), info

    return env, goals, act


def test_highlevel_pick_and_correct_place_captions_goals_and_rewards():
    env, goals, act = scripted()
    assert [o.key for o in env.episode.scene_objects] == [
        "shoe_1", "helmet_1", "saucer_1", "picture_frame_1", "table_lamp_1"]
    assert goals == ["pick helmet", "pick saucer", "pick picture frame"]  # visible, misplaced
    assert env.text() == ("objects: helmet, saucer, picture frame. receptacles: bathroom "
                          "bathtub, bathroom carpet, bathroom table, bathroom toilet, bathroom "
                          "top cabinet, window.")

    obs, game, reward, goals, info = act("go to bedroom_0-chair_1_0.urdf")
    assert (info["transition_caption"], reward, goals) == ("", 0.0, ["pick shoe"])
    obs, game, reward, goals, info = act("pick shoe_1")
    assert (info["transition_caption"], reward, game, goals) == ("pick shoe", 2.5, 0.0, [])
    assert obs["text_obs"].endswith("you are holding: shoe.")
    obs, game, reward, goals, info = act("go to bedroom_0-shelf_13_0.urdf")
    assert goals == ["shoe in bedroom shelf"]  # a seen receptacle the oracle says yes to
    obs, game, reward, goals, info = act("place")
    assert (info["transition_caption"], reward, game) == ("shoe in bedroom shelf", 2.5, 1.0)
    stats = env.episode_stats()
    assert stats["rearrange_success"] == pytest.approx(1 / 5)
    assert stats["misplaced_success"] == 1 and stats["pick_success"] == pytest.approx(0.2)
    assert stats["place_success"] == pytest.approx(0.2)
    assert "you are holding" not in obs["text_obs"]


def test_highlevel_wrong_place_failed_grab_and_novelty_penalties():
    env, _, act = scripted()
    act("go to bathroom_0-toilet_25_0.urdf")
    assert act("pick helmet_1")[2] == 2.5
    act("go to bathroom_0-table_7_0.urdf")  # not a correct receptacle for a helmet
    _, _, reward, _, info = act("pick saucer_1")  # hands full: a failed grab
    assert (info["event"].kind, info["transition_caption"], reward) == ("failed", "", -0.2)
    _, game, reward, goals, info = act("place")
    assert (info["transition_caption"], reward, game) == ("helmet in bathroom table", -0.25, 0.0)
    assert goals == ["pick saucer", "pick picture frame"]  # "pick helmet" paid once already
    assert act("place")[2] == -0.2  # holding nothing
    assert act("pick helmet_1")[2] == -0.25  # a second pick is not suggested any more
    stats = env.episode_stats()
    assert (stats["failed_actions"], stats["picks"], stats["places"]) == (2, 2, 1)
    assert stats["rearrange_success"] == 0


def test_episode_ends_when_everything_is_put_away():
    env, _, act = scripted()
    ep = env.episode
    full = []
    for o, obj in enumerate(ep.scene_objects):
        act(f"go to {ep.receptacles[ep.start[o]].key}")
        act(f"pick {obj.key}")
        for r in sorted(ep.correct[o]):  # the first correct receptacle with room
            act(f"go to {ep.receptacles[r].key}")
            _, game, _, _, info = act("place")
            if info["event"].kind == "place":
                break
            full.append((obj.key, info["event"].reason))
        assert game == 1.0
    assert full == [("picture_frame_1", "no room on the receptacle")]  # the helmet took it
    assert info["discount"] == 0.0 and info["episode_stats"]["rearrange_success"] == 1.0


def test_truncation_keeps_the_discount_in_version_2():
    env = th.make("pomaria_2_int", 0, length=3, version=2)  # v1: terminal (test_fidelity.py)
    env.reset()
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(1)
    assert truncated and not terminated and info["discount"] == 1.0
    assert info["episode_stats"]["length"] == 3


def test_text_observation_omits_empty_parts():
    assert text_observation([], [], None) == ""
    assert text_observation(["cup"], [], "book") == "objects: cup. you are holding: book."


# ---------------------------------------------------------------------------- low level
def _rec(key, pos, nav, footprint):
    room, category = parse_receptacle_key(key)
    return Receptacle(key, room, category, pos, nav, footprint)


def hand_built(cup_size=(0.2, 0.2)) -> Episode:
    """Agent at the origin facing -z, in the living room; see the asserts for the layout."""
    recs = (
        _rec("living_room_0-table_1_0.urdf", (0, 0.5, -1), (0, 0, -0.4), (-0.4, -1.3, 0.8, 0.6)),
        _rec("living_room_0-table_2_0.urdf", (0, 0.5, -3), (0, 0, -2.4), (-0.4, -3.3, 0.8, 0.6)),
        _rec("None-window_3_0.urdf", (0, 1.4, -4), (0, 0, -3.6), (-0.5, -4.05, 1.0, 0.1)),
        _rec("living_room_0-shelf_4_0.urdf", (3, 0.5, 0), (2.4, 0, 0), (2.8, -0.3, 0.4, 0.6)),
        _rec("kitchen_0-counter_5_0.urdf", (1, 0.9, -2), (2.5, 0, -2.5), (0.5, -2.3, 1, 0.6)),
        _rec("living_room_0-chair_6_0.urdf", (-1, 0.4, -7), (-1, 0, -6.4), (-1.2, -7.2, .4, .4)),
    )
    objects = (HouseObject("cup_1", "cup", (0, 0.8, -1), cup_size),
               HouseObject("book_1", "book", (0, 0.8, -3), (0.7, 0.55)))
    none = (0.0,) * len(recs)
    return Episode(scene="handmade", split="test", episode_id=0, receptacles=recs,
                   objects=objects, misplaced_count=2, start=(0, 1),
                   correct=(frozenset({3}), frozenset({3})), approval=(none, none),
                   start_position=(0.0, 0.0, 0.0), start_yaw=0.0, oracle_steps=0)


def test_lowlevel_visibility_by_distance_field_of_view_and_room():
    backend = SymbolicBackend(hand_built())
    act = {name: i for i, name in enumerate(backend.action_names)}
    state = backend.reset()
    # tables ahead and the window (no room) are seen; the shelf is outside the 90 degree view,
    # the kitchen counter is in another room, the chair is 7 m away
    assert state.visible_receptacles == (0, 1, 2)
    assert state.visible_objects == (0, 1)
    for _ in range(9):  # 90 degrees to the right: facing +x
        state = backend.step(act["TURN_RIGHT"])
    assert 3 in state.visible_receptacles and 0 not in state.visible_receptacles
    for _ in range(12):  # walk along +x: the floor ends about 1 m past the navigable points
        state = backend.step(act["MOVE_FORWARD"])
    assert backend.floor.walkable(backend.x, backend.z) and backend.x <= 3.4 + 1e-9
    assert state.image.shape == (84, 84, 3) and state.image.dtype == np.uint8


def test_lowlevel_grab_release_reach_and_capacity():
    backend = SymbolicBackend(hand_built())
    act = {name: i for i, name in enumerate(backend.action_names)}
    backend.reset()
    state = backend.step(act["GRAB_RELEASE"])  # the cup, 1 m ahead, under the crosshair
    assert (state.event.kind, state.event.obj, state.held) == ("pick", 0, 0)
    assert state.mapping == (None, 1)
    backend.step(act["LOOK_UP"])
    state = backend.step(act["LOOK_UP"])  # the far table is now nearest the view ray
    state = backend.step(act["GRAB_RELEASE"])
    assert (state.event.kind, state.event.rec, state.event.reason) == (
        "failed", 1, "out of reach")
    for _ in range(6):
        backend.step(act["MOVE_FORWARD"])
    assert backend.z == pytest.approx(-1.5)
    backend.step(act["LOOK_DOWN"])
    backend.step(act["LOOK_DOWN"])  # back to -30: the table, not the window, under the ray
    state = backend.step(act["GRAB_RELEASE"])  # in reach now, but the book fills the table
    assert (state.event.kind, state.event.rec, state.event.reason) == (
        "failed", 1, "no room on the receptacle")
    small = SymbolicBackend(hand_built(cup_size=(0.1, 0.1)))
    small.reset()
    for name in ("GRAB_RELEASE", *["MOVE_FORWARD"] * 6, "GRAB_RELEASE"):
        state = small.step(act[name])
    assert (state.event.kind, state.event.obj, state.event.rec) == ("place", 0, 1)
    assert state.mapping == (1, 1) and state.held is None


def test_grab_with_nothing_under_the_crosshair_fails():
    backend = SymbolicBackend(hand_built())
    act = {name: i for i, name in enumerate(backend.action_names)}
    backend.reset()
    for _ in range(18):  # facing +z: nothing there
        backend.step(act["TURN_LEFT"])
    state = backend.step(act["GRAB_RELEASE"])
    assert (state.event.kind, state.event.reason) == ("failed", "nothing under the crosshair")
    with pytest.raises(BackendError, match="out of range"):
        backend.step(6)


def test_shelf_packer_rows_and_repacking():
    packer = ShelfPacker(1.0, 0.5)
    assert packer.add(0, (0.6, 0.3)) == pytest.approx((0.3, 0.15))
    assert packer.add(1, (0.4, 0.3)) == pytest.approx((0.8, 0.15))
    assert packer.add(2, (0.5, 0.3)) is None  # no row has room, no depth left for a new row
    assert packer.add(3, (0.5, 0.2)) == pytest.approx((0.25, 0.4))
    packer.remove(0)  # the rest repacked in order: both now fit in the first row
    assert len(packer) == 2 and packer.slot(3) == pytest.approx((0.65, 0.1))
    assert packer.fits((0.1, 0.3)) and not packer.fits((0.5, 0.3))


# ---------------------------------------------------------------------------- LM layer
def test_yes_no_prompt_and_accuracy_against_the_ground_truth():
    prompt = yes_no_prompt("water bottle", "bathroom sink")
    assert prompt.endswith("\nShould you store a water bottle in/on the bathroom sink:")
    assert prompt.count("Should you store") == 4
    records = [{(0, 1): AnswerRecord(True, True), (0, 2): AnswerRecord(True, False)},
               {(1, 1): AnswerRecord(False, True), (0, 1): AnswerRecord(True, True)}]
    metrics = answer_metrics(records)
    assert metrics == {"lm_pairs": 3.0, "lm_accuracy": pytest.approx(1 / 3),
                       "lm_precision": 0.5, "lm_recall": 0.5}


def test_baseline_suggests_every_pair():
    env = th.make("pomaria_2_int", 0, action_mode="highlevel")
    _, info = env.reset()
    suggester = HousekeepSuggester(None)
    assert suggester.suggest(info["view"]) == [
        "pick helmet", "pick saucer", "pick picture frame"]
    env.step(env.action_names.index("go to bathroom_0-toilet_25_0.urdf"))
    *_, info = env.step(env.action_names.index("pick helmet_1"))
    seen = info["view"].seen_receptacles
    assert len(suggester.suggest(info["view"])) == len({env.receptacle_names[r] for r in seen})


# ---------------------------------------------------------------------------- habitat bridge
def serve_command(task="pomaria_2_int", ep_num=0, mode="lowlevel"):
    return [sys.executable, "-m", "text_housekeep.bridge", "--task", task, "--ep-num",
            str(ep_num), "--action-mode", mode]


def test_bridge_protocol_matches_the_in_process_backend():
    episode = load_episode("pomaria_2_int", 0)
    remote = HousekeepTextEnv(episode, ProcessBackend(serve_command(), episode))
    local = th.make("pomaria_2_int", 0)
    try:
        assert remote.action_names == local.action_names
        a, b = remote.reset()[0], local.reset()[0]
        assert a["text_obs"] == b["text_obs"] and np.array_equal(a["image"], b["image"])
        rng = np.random.default_rng(0)
        for action in rng.integers(0, 6, size=150):
            ra, la = remote.step(action), local.step(action)
            assert ra[0]["text_obs"] == la[0]["text_obs"]
            assert np.array_equal(ra[0]["image"], la[0]["image"])
            assert ra[1:4] == la[1:4]
            assert ra[4]["transition_caption"] == la[4]["transition_caption"]
            assert remote._state.same_as(local._state)
        with pytest.raises(BackendError, match="out of range"):
            remote.backend.step(17)
        remote.step(0)  # the server survives a bad request
    finally:
        remote.close()
    assert remote.backend._proc.poll() == 0


def _fake(tmp_path, body: str) -> list[str]:
    script = tmp_path / "fake.py"
    script.write_text(body)
    return [sys.executable, str(script)]


def test_bridge_reports_broken_backend_processes(tmp_path):
    episode = load_episode("pomaria_2_int", 0)
    with pytest.raises(BackendError, match="exited with code 3"):
        ProcessBackend(_fake(tmp_path, "import sys; sys.exit(3)\n"), episode)
    with pytest.raises(BackendError, match="broke the protocol"):
        ProcessBackend(_fake(tmp_path, "print('habitat-sim 0.2.1 banner')\n"), episode)
    hello = {"protocol": 1, "backend": "fake", "action_names": ["MOVE_FORWARD"],
             "objects": ["cup_1"], "receptacles": []}
    with pytest.raises(BackendError, match="different episode"):
        ProcessBackend(_fake(tmp_path, f"print({json.dumps(json.dumps(hello))})\n"), episode)
    backend = ProcessBackend(serve_command(), episode)
    backend._proc.kill()
    backend._proc.wait()
    with pytest.raises(BackendError, match="exited with code"):
        backend.reset()


def test_habitat_backend_needs_its_interpreter(monkeypatch):
    monkeypatch.delenv("ELLM_HABITAT_PYTHON", raising=False)
    episode = load_episode("pomaria_2_int", 0)
    with pytest.raises(BackendError, match="ELLM_HABITAT_PYTHON"):
        habitat_backend(episode)
    with pytest.raises(BackendError, match="highlevel"):
        habitat_backend(episode, "highlevel")


@pytest.mark.skipif(not os.environ.get("ELLM_HABITAT_PYTHON"),
                    reason="habitat-sim is not installed here (set ELLM_HABITAT_PYTHON and "
                           "ELLM_HOUSEKEEP_ROOT to run it; docs/housekeep.md)")
def test_real_habitat_backend_runs_steps():
    env = th.make("pomaria_2_int", 0, backend="habitat")
    try:
        obs, _ = env.reset()
        assert obs["image"].shape == (128, 128, 3)
        for action in (2, 2, 0, 5, 5):
            obs, *_ = env.step(action)
        assert isinstance(obs["text_obs"], str)
    finally:
        env.close()


# ---------------------------------------------------------------------------- config
def housekeep_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT), version_base="1.3"):
        return compose("config", overrides=["env_spec.name=Housekeep", *overrides])


def test_default_config_is_valid_for_housekeep():
    cfg = housekeep_cfg()
    assert cfg.env_spec.housekeep_task == th.DEFAULT_TASK
    validate(cfg)


@pytest.mark.parametrize("overrides, message", [
    (["env_spec.housekeep_task=rs_int"], "env_spec.housekeep_task='rs_int'"),
    (["env_spec.housekeep_ep_num=5000"], "env_spec.housekeep_ep_num=5000"),
    (["env_spec.housekeep_data=/nonexistent/scenes"], "/nonexistent/scenes"),
    (["env_spec.housekeep_action_mode=teleport"], "env_spec.housekeep_action_mode"),
    (["env_spec.housekeep_backend=unity"], "env_spec.housekeep_backend"),
    (["env_spec.housekeep_length=0"], "env_spec.housekeep_length"),
    (["use_language_state=sbert"], "env_spec.use_language_state=True"),
    (["single_goal_eval=True"], "single_goal_eval"),
])
def test_bad_housekeep_config_names_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        validate(housekeep_cfg(*overrides))


@pytest.mark.parametrize("env_key", ["env_spec.text_obs=True", "env_spec.use_language_state=True"])
def test_text_obs_and_its_original_name_make_the_env_write_text(env_key):
    spec = validate(housekeep_cfg("use_language_state=sbert", env_key))
    assert spec.env.writes_text
    obs, _ = spec.game.make_env(spec, seed=0).reset()
    assert obs["text_obs"]
    silent = validate(housekeep_cfg())
    assert not silent.env.writes_text
    assert silent.game.make_env(silent, seed=0).reset()[0]["text_obs"] == ""


def test_text_obs_and_its_original_name_may_not_disagree():
    with pytest.raises(ConfigError, match=r"env_spec\.text_obs=True and env_spec\."
                                          r"use_language_state=False disagree"):
        validate(housekeep_cfg("env_spec.text_obs=True", "env_spec.use_language_state=False"))


def test_missing_scene_file_names_the_directory(tmp_path):
    (tmp_path / "Other_int.json.gz").write_bytes(b"")
    with pytest.raises(ConfigError, match=str(tmp_path)):
        validate(housekeep_cfg(f"env_spec.housekeep_data={tmp_path}"))
    with pytest.raises(ConfigError, match="Other_int.json.gz"):
        validate(housekeep_cfg(f"env_spec.housekeep_data={tmp_path}",
                               "env_spec.housekeep_task=other_int"))


# ---------------------------------------------------------------------------- end to end
README_PRETRAIN = (
    "env_spec.use_sbert=True use_language_state=sbert env_spec.use_language_state=True "
    "env_spec.lm_spec.lm_class=GPTLanguageModel env_spec.lm_spec.lm=text-davinci-002 "
    "env_spec.lm_spec.budget=10 env_spec.lm_spec.temperature=0 env_spec.lm_spec.prob_threshold=.5 "
    "env_spec.name=Housekeep use_wandb=true num_train_frames=4000000 replay_buffer_num_workers=5 "
    "batch_size=256 agent.train_eps_min=0.1 agent.train_eps_decay_steps=5000000 exp_name=TEST_RUN "
    "env_spec.housekeep_ep_num=2")
README_FINETUNE = (
    "env_spec.use_sbert=True use_language_state=sbert env_spec.use_language_state=True "
    "env_spec.lm_spec.lm_class=SimpleOracle finetune_snapshot=True "
    "snapshot_path=ADD_PATH_TO_PRETRAINED_MODEL_HERE env_spec.name=Housekeep use_wandb=true "
    "num_train_frames=5000000 replay_buffer_num_workers=5 batch_size=256 "
    "agent.train_eps_min=0.1 agent.train_eps_decay_steps=5000000 exp_name=FINETUNE_RUN "
    "env_spec.housekeep_ep_num=2")
README_EXPLORE = (
    "env_spec.use_sbert=True use_language_state=sbert env_spec.use_language_state=True "
    "env_spec.lm_spec.lm_class=SimpleOracle finetune_snapshot=True env_spec.name=Housekeep "
    "use_wandb=true num_train_frames=5000000 replay_buffer_num_workers=5 batch_size=256 "
    "agent.train_eps_min=0.2 agent.train_eps_decay_steps=1000000 exp_name=EXPL_RUN "
    "env_spec.housekeep_ep_num=2 expl_agent_path=ADD_PATH_TO_PRETRAINED_MODEL_HERE")
TINY = {"num_train_frames": "120", "num_seed_frames": "40", "eval_every_frames": "60",
        "num_eval_episodes": "1", "env_spec.housekeep_length": "30",
        "replay_buffer_num_workers": "0", "batch_size": "8",
        "agent.critic_target_update_every_steps": "40", "progress": "false"}


def readme_command(command: str, **changes: str) -> list[str]:
    """The README command with the tiny budget (and ``changes``) replacing its values."""
    args = dict(arg.split("=", 1) for arg in command.split())
    args.update(TINY)
    args.update({key.replace("__", "."): value for key, value in changes.items()})
    return [f"{key}={value}" for key, value in args.items()]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """The README's Housekeep pretraining command (GPT, yes/no logprobs) against a local
    OpenAI-compatible server: the LM says yes to shelves and cabinets, no to the rest. Episode
    0 instead of 2: its start view holds objects, so 120 random steps ask the LM questions."""
    try:
        from tests.openai_test_server import OpenAITestServer, Reply
    except ImportError:
        from openai_test_server import OpenAITestServer, Reply

    def responder(body):
        prompt = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
        question = prompt.rsplit("\n", 1)[-1]
        yes = "shelf" in question or "cabinet" in question
        return Reply.yes_no(-0.05 if yes else -3.0, -3.0 if yes else -0.05)

    cwd = tmp_path_factory.mktemp("housekeep_pretrain")
    with OpenAITestServer() as server:
        server.responder = responder
        run_train(cwd, *readme_command(README_PRETRAIN, env_spec__lm_spec__base_url=server.base_url,
                                  env_spec__housekeep_ep_num="0"))
        requests = len(server.requests)
    out = find_run(cwd, "TEST_RUN")
    assert requests > 0
    lm = csv_rows(out / "lm.csv")[-1]
    assert float(lm["api_calls"]) == requests  # every distinct question asked once
    return out


@pytest.mark.e2e
def test_pretraining_with_gpt_yes_no_logs_housekeep_metrics(pretrained):
    config = json.loads((pretrained / "config.json").read_text())
    assert config["env_spec"]["name"] == "Housekeep"
    assert config["env_spec"]["housekeep_task"] == th.DEFAULT_TASK
    housekeep = csv_rows(pretrained / "housekeep.csv")
    assert [int(r["frame"]) for r in housekeep] == [0, 60, 120]
    for key in ("rearrange_success", "misplaced_success", "pick_success", "place_success",
                "soft_score", "lm_accuracy", "lm_pairs"):
        assert key in housekeep[0]
    assert 0.0 <= float(housekeep[-1]["lm_accuracy"]) <= 1.0
    train_rows = csv_rows(pretrained / "train.csv")
    assert len(train_rows) == 4 and "rearrange_success" in train_rows[0]
    # Coverage: objects and receptacles picked or placed on (the scene has 5 objects).
    assert all(0 <= float(r["coverage"]) <= 5 + float(r["places"]) for r in train_rows)
    stats = [json.loads(line) for line in
             (pretrained / "eval" / "stats.jsonl").read_text().splitlines()]
    assert len(stats) == 3 and {"rearrange_success", "length"} <= set(stats[0])
    assert list(pretrained.glob("wandb/offline-run-*"))
    snapshot = torch.load(pretrained / "snapshot.pt", weights_only=True)
    assert snapshot["meta"]["frame"] == 120


@pytest.mark.e2e
def test_finetuning_with_the_oracle_from_the_snapshot(train, pretrained, tmp_path):
    train(*readme_command(README_FINETUNE, snapshot_path=str(pretrained)))
    out = find_run(tmp_path, "FINETUNE_RUN")
    assert torch.load(out / "snapshot.pt", weights_only=True)["meta"]["frame"] == 120
    lm = csv_rows(out / "lm.csv")[-1]
    assert float(lm["queries"]) > 0 and float(lm["api_calls"]) == 0  # the oracle: no API
    assert float(csv_rows(out / "housekeep.csv")[-1]["lm_accuracy"]) == 1.0


@pytest.mark.e2e
def test_guided_exploration_from_the_pretrained_agent(train, pretrained, tmp_path):
    proc = train(*readme_command(README_EXPLORE, expl_agent_path=str(pretrained)))
    assert "finetune_snapshot=True without snapshot_path" in proc.stdout + proc.stderr
    out = find_run(tmp_path, "EXPL_RUN")
    assert "guided exploration from" in (out / "train.log").read_text()
    assert len(csv_rows(out / "eval.csv")) == 3


@pytest.mark.e2e
def test_bad_scene_stops_train_py_before_training(train, tmp_path):
    proc = train(*["env_spec.name=Housekeep", "env_spec.housekeep_task=rs_int",
                            "exp_name=BAD", *[f"{k}={v}" for k, v in TINY.items()]],
                 check=False, timeout=120)
    assert proc.returncode == 2
    assert "env_spec.housekeep_task='rs_int'" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("exp_local/*/BAD_*/train.csv"))
