"""Stable-Baselines3 on the games' training ids: its ``check_env`` refuses the raw env (text
fields in the observation) and passes it inside ``text_game.image_only.ImageOnly``, on which
PPO and DQN learn a few steps (docs/llf.md, "RL libraries: Stable-Baselines3")."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import text_crafter
import text_housekeep
from text_game.image_only import ImageOnly

pytest.importorskip("stable_baselines3", reason="needs the dev extra: pip install -e '.[dev]'")
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_checker import check_env

TRAINING_IDS = [*text_crafter.ENV_SPECS, *text_housekeep.GYM_IDS]
LEARN_IDS = ["CrafterTextEnv-v2", "Housekeep-v2"]  # one of each game: learning takes seconds
pytestmark = pytest.mark.filterwarnings("ignore:.*is out of date:DeprecationWarning")


def _make(env_id: str) -> gym.Env:
    kwargs = {"length": 20} if env_id in text_crafter.ENV_SPECS else {}
    return gym.make(env_id, **kwargs)


@pytest.mark.parametrize("env_id", TRAINING_IDS)
def test_sb3_check_env_refuses_the_raw_env_and_passes_it_image_only(env_id):
    with pytest.raises(AssertionError, match="must be a numpy array"):
        check_env(_make(env_id))
    env = ImageOnly(_make(env_id))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SB3 warns where a space would train badly
        check_env(env)
    obs, _ = env.reset(seed=0)
    raw, _ = _make(env_id).reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == env.observation_space.shape
    assert np.array_equal(obs, raw["image"])


@pytest.mark.parametrize("env_id", LEARN_IDS)
@pytest.mark.parametrize("algo", [PPO, DQN], ids=["ppo", "dqn"])
def test_ppo_and_dqn_learn_a_few_steps_on_the_image(env_id, algo):
    kwargs = ({"n_steps": 32, "batch_size": 32, "n_epochs": 1} if algo is PPO
              else {"buffer_size": 256, "learning_starts": 16, "train_freq": 4, "batch_size": 8})
    model = algo("CnnPolicy", ImageOnly(_make(env_id)), seed=0, device="cpu", **kwargs)
    model.learn(64)
    assert model.num_timesteps == 64


def test_image_only_names_what_it_needs():
    with pytest.raises(TypeError, match="'image' Box"):
        ImageOnly(gym.make("CartPole-v1"))
