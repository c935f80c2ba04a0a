"""Every game's gymnasium id passes gymnasium's own environment checker, rendering included."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import RenderCollection

import text_crafter
import text_housekeep
from ellm.games import env_names

GYM_IDS = [*text_crafter.ENV_SPECS, *text_housekeep.GYM_IDS]


def _make(env_id: str, **kwargs) -> gym.Env:
    if env_id in text_crafter.ENV_SPECS:
        kwargs.setdefault("length", 20)  # check_env steps; short episodes keep it quick
    return gym.make(env_id, **kwargs)


def _gymnasium_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    # gymnasium.logger.warn prefixes its messages with "WARN:"; other libraries' warnings
    # (numba, deprecations) are not the environment's concern.
    return [str(w.message) for w in caught if "WARN:" in str(w.message)]


def test_every_training_env_name_is_a_gymnasium_id():
    # "Housekeep" (the original's env_spec.name) is Housekeep-v1 in gymnasium, which forbids an
    # unversioned id beside versioned ones.
    names = [n if n != text_housekeep.ENV_ID else "Housekeep-v1" for n in env_names()]
    assert sorted(set(names)) == sorted(GYM_IDS)
    assert all(env_id in gym.registry for env_id in GYM_IDS)


@pytest.mark.parametrize("env_id", GYM_IDS)
@pytest.mark.parametrize("render_mode", [None, "rgb_array"])
def test_gymnasium_env_checker_passes_with_its_render_checks(env_id, render_mode):
    env = _make(env_id, render_mode=render_mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Without skip_render_check, check_env also makes the env in every declared render mode.
        check_env(env.unwrapped)
    assert _gymnasium_warnings(caught) == []
    env.close()


@pytest.mark.parametrize("env_id", GYM_IDS)
def test_rgb_array_renders_the_observed_image(env_id):
    env = _make(env_id, render_mode="rgb_array")
    assert env.metadata["render_modes"] == ["rgb_array"] and env.metadata["render_fps"] == 5
    obs, _ = env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.shape == env.observation_space["image"].shape
    assert np.array_equal(frame, obs["image"])
    obs, *_ = env.step(env.action_space.sample())
    assert np.array_equal(env.render(), obs["image"])
    env.close()


@pytest.mark.parametrize("env_id", GYM_IDS)
def test_without_a_render_mode_render_warns_and_returns_none(env_id):
    env = _make(env_id, render_mode=None)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="without specifying any render mode"):
        assert env.render() is None
    env.close()


@pytest.mark.parametrize("env_id", GYM_IDS)
def test_an_unknown_render_mode_is_refused(env_id):
    with pytest.raises(ValueError, match="render_mode='ansi'"):
        _make(env_id, render_mode="ansi")


@pytest.mark.parametrize("env_id", GYM_IDS)
def test_rgb_array_list_collects_one_frame_per_reset_and_step(env_id):
    # gymnasium.make turns "rgb_array_list" into "rgb_array" under RenderCollection.
    env = _make(env_id, render_mode="rgb_array_list")
    assert isinstance(env, RenderCollection) and env.unwrapped.render_mode == "rgb_array"
    obs, _ = env.reset(seed=0)
    images = [obs["image"]]
    for _ in range(3):
        obs, *_ = env.step(env.action_space.sample())
        images.append(obs["image"])
    frames = env.render()
    assert len(frames) == len(images)
    assert all(np.array_equal(f, i) for f, i in zip(frames, images))
    env.close()


@pytest.mark.parametrize("env_id", ["CrafterTextEnv-v2", "Housekeep-v1"])
def test_record_video_writes_each_episode_frame_by_frame(env_id, tmp_path):
    import imageio.v3 as iio
    from gymnasium.wrappers import RecordVideo

    env = RecordVideo(_make(env_id, render_mode="rgb_array"), str(tmp_path),
                      episode_trigger=lambda _: True, disable_logger=True)
    obs, _ = env.reset(seed=0)
    steps = 5
    for _ in range(steps):
        obs, *_ = env.step(env.action_space.sample())
    env.close()  # ends the recording of the unfinished episode
    (video,) = tmp_path.glob("*.mp4")
    frames = iio.imread(video)
    assert frames.shape[0] == steps + 1  # the reset's frame and one per step
    assert frames.shape[1:3] == obs["image"].shape[:2]


def test_infos_kept_by_a_user_do_not_change_later():
    env = gym.make("CrafterTextEnv-v1", seed=0)
    env.reset(seed=0)
    kept = [env.step(i % 5)[-1] for i in range(12)]
    positions = [info["player_pos"] for info in kept]
    assert len({id(p) for p in positions}) == len(positions)
    assert any(not np.array_equal(positions[0], p) for p in positions[1:])  # the player moved
