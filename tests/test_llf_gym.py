"""The LLF ids under gymnasium's tools: ``render_mode="rgb_array"`` gives the game's frame (so
RecordVideo records an episode), and AsyncVectorEnv steps them with its default shared memory,
None fields included, exactly as a single env does."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest

import text_crafter  # noqa: F401 - registers llf-crafter-v0
import text_housekeep  # noqa: F401 - registers llf-housekeep-v0
from text_game.spaces import TextField

pytest.importorskip("moviepy", reason="RecordVideo writes with moviepy: pip install -e '.[dev]'")

HAS_METAWORLD = importlib.util.find_spec("metaworld") is not None
METAWORLD = pytest.param("llf-metaworld-pick-place-v2", marks=pytest.mark.skipif(
    not HAS_METAWORLD, reason="needs the optim extra: pip install -e '.[optim]'"))
# Actions of each id: a move, a no-op and something that is no action.
ACTIONS = {"llf-crafter-v0": ["move left", "do nothing", "noop?"],
           "llf-housekeep-v0": ["do nothing", "place", "x"],
           "llf-metaworld-pick-place-v2": [[0.0, 0.6, 0.2, 0.0], [0.1, 0.6, 0.1, 1.0], "up"]}
if HAS_METAWORLD:
    import llm_in_the_loop  # noqa: F401 - registers llf-metaworld-pick-place-v2


@pytest.mark.parametrize("env_id", ["llf-crafter-v0", "llf-housekeep-v0"])
def test_record_video_records_an_llf_episode(env_id, tmp_path):
    env = gym.make(env_id, render_mode="rgb_array")
    assert env.render_mode == "rgb_array"
    recorder = gym.wrappers.RecordVideo(env, str(tmp_path / "videos"), episode_trigger=lambda _: True,
                                        disable_logger=True)
    recorder.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    for action in ACTIONS[env_id]:
        recorder.step(action)
    recorder.close()
    (video,) = (tmp_path / "videos").glob("*.mp4")
    assert video.stat().st_size > 0


@pytest.mark.skipif(not HAS_METAWORLD, reason="needs the optim extra: pip install -e '.[optim]'")
def test_metaworld_renders_or_is_refused_when_made():
    # MuJoCo renders off screen only with an OpenGL backend (EGL, OSMesa): without one the
    # env is refused at make, naming the fix, not at the first frame of a recording.
    try:
        env = gym.make("llf-metaworld-pick-place-v2", render_mode="rgb_array")
    except RuntimeError as err:
        assert "MUJOCO_GL=egl" in str(err) and "MUJOCO_GL=osmesa" in str(err)
        return
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3
    env.close()


@pytest.mark.parametrize("env_id", ["llf-crafter-v0", "llf-housekeep-v0", METAWORLD])
def test_an_unknown_render_mode_is_refused(env_id):
    with pytest.raises(ValueError, match="render_mode='human' is not supported"):
        gym.make(env_id, render_mode="human")


@pytest.mark.parametrize("env_id", ["llf-crafter-v0", "llf-housekeep-v0", METAWORLD])
def test_async_vector_env_with_shared_memory_steps_as_a_single_env(env_id):
    vector = gym.vector.AsyncVectorEnv([lambda: gym.make(env_id)] * 2)
    single = gym.make(env_id)
    try:
        batch, _ = vector.reset(seed=[3, 4])
        obs, _ = single.reset(seed=4)
        assert batch["feedback"] == (None, None) and obs["feedback"] is None
        for action in ACTIONS[env_id]:
            assert {k: batch[k][1] for k in obs} == obs
            batch, *_ = vector.step([action, action])
            obs, *_ = single.step(action)
        assert {k: batch[k][1] for k in obs} == obs and batch["instruction"] == (None, None)
        assert "not" in obs["feedback"]  # the last action is none: the feedback says so
        assert isinstance(batch["feedback"], tuple)  # a copy, not the live buffer
    finally:
        vector.close()
        single.close()


def test_the_fields_hold_none_only_where_the_contract_has_it():
    text, optional = TextField(8, min_length=0), TextField(8, min_length=0, optional=True)
    assert optional.contains(None) and optional.contains("ab") and not text.contains(None)
    assert text != optional and text == gym.spaces.Text(8, min_length=0)
