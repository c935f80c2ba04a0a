"""Every game's gymnasium id passes gymnasium's own environment checker."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import text_crafter
import text_housekeep
from ellm.games import env_names

GYM_IDS = [*text_crafter.ENV_SPECS, *text_housekeep.GYM_IDS]


def test_every_training_env_name_is_a_gymnasium_id():
    # "Housekeep" (the original's env_spec.name) is Housekeep-v1 in gymnasium, which forbids an
    # unversioned id beside versioned ones.
    names = [n if n != text_housekeep.ENV_ID else "Housekeep-v1" for n in env_names()]
    assert sorted(set(names)) == sorted(GYM_IDS)
    assert all(env_id in gym.registry for env_id in GYM_IDS)


@pytest.mark.parametrize("env_id", GYM_IDS)
def test_gymnasium_env_checker_passes(env_id):
    env = gym.make(env_id, length=20) if env_id in text_crafter.ENV_SPECS else gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_infos_kept_by_a_user_do_not_change_later():
    env = gym.make("CrafterTextEnv-v1", seed=0)
    env.reset(seed=0)
    kept = [env.step(i % 5)[-1] for i in range(12)]
    positions = [info["player_pos"] for info in kept]
    assert len({id(p) for p in positions}) == len(positions)
    assert any(not np.array_equal(positions[0], p) for p in positions[1:])  # the player moved
