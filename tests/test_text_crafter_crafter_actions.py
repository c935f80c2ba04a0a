"""The ``crafter`` action space: Crafter's own 17 actions, whose ``do`` is named, gated and judged
as the named action it carries out ("chop tree" facing a tree)."""

from __future__ import annotations

from pathlib import Path

import crafter
import numpy as np
import pytest
import torch
from crafter import objects
from hydra import compose, initialize_config_dir
from test_text_crafter import at
from test_text_crafter import blank_env as grass_env  # tests/ is on sys.path, as for conftest

from ellm.loop.parts import make_agent
from ellm.run.config import validate
from text_crafter import actions as acts

ROOT = Path(__file__).resolve().parents[1]
DO_ID = 5


def blank_env(env_id="CrafterTextEnv-v2", action_space_type="crafter", target="grass"):
    """A reset env on grass with no creatures, facing ``target`` (a material) below."""
    env = grass_env(env_id, action_space_type=action_space_type)
    env.world[below(env)] = target
    return env


def below(env):
    return at(env, 0, 1)


def test_the_17_names_and_ids_are_crafters_actions_in_order():
    assert acts.ACTION_SPACES["crafter"] == acts.CRAFTER_ACTIONS
    assert len(acts.CRAFTER_ACTIONS) == 17 and acts.CRAFTER_ACTIONS[DO_ID] == "do"
    upstream = [acts.UPSTREAM[name][0] for name in acts.CRAFTER_ACTIONS]
    assert upstream == list(crafter.constants.actions)
    # Each name "do" takes is the good action the other spaces call upstream "do" on that target.
    assert {target: name for name, (up, target) in acts.UPSTREAM.items()
            if up == "do" and target is not None and name != "eat cow"} == acts.DO_NAMES
    assert set(acts.DO_NAMES.values()) <= set(acts.GOOD_ACTIONS)


def test_the_env_sends_each_id_to_the_upstream_action_of_the_same_index():
    env = blank_env()
    sent = []
    engine_step = env._engine.step

    def recording_step(index):
        sent.append(index)
        return engine_step(index)

    env._engine.step = recording_step
    assert env.action_space.n == 17 and env.action_names == acts.CRAFTER_ACTIONS
    for action in range(17):
        env.step(action)
    assert sent == list(range(17))


def test_do_facing_a_tree_chops_it_and_says_so():
    env = blank_env(target="tree")
    _, reward, _, _, info = env.step(DO_ID)
    assert info["action_name"] == "chop tree"
    assert info["transition_caption"] == "chop tree"
    assert info["effective_success"] and info["unlocked"] == ["collect_wood"]
    assert env.player.inventory["wood"] == 1 and reward == 1.0


def _face_object(env, kind):
    pos = below(env)
    if kind == "ripe plant":
        plant = objects.Plant(env.world, pos)
        plant.grown = 1000
        env.world.add(plant)
    elif kind == "plant":
        env.world.add(objects.Plant(env.world, pos))
    elif kind == "zombie":
        env.world.add(objects.Zombie(env.world, pos, env.player))
    elif kind == "cow":
        env.world.add(objects.Cow(env.world, pos))
    else:
        env.world[pos] = kind
    env.player.inventory["drink"] = 5  # v1 collects nothing at 9


@pytest.mark.parametrize("env_id", ["CrafterTextEnv-v1", "CrafterTextEnv-v2"])
@pytest.mark.parametrize("kind, named", [
    ("tree", "chop tree"), ("grass", "chop grass"), ("stone", "mine stone"),
    ("water", "drink water"), ("cow", "attack cow"), ("zombie", "attack zombie"),
    ("plant", "eat plant"), ("ripe plant", "eat plant"),
])
def test_do_is_handled_as_the_named_action_on_its_target(env_id, kind, named):
    """``do`` and the named action (harder space) give the same frames, text, rewards and
    infos: stone needs a pickaxe, a sapling is not food yet, and grass, which stays grass,
    gives a sapling now and then, the same steps for both."""
    steps = 30 if kind == "grass" else 1
    runs = []
    for space, action in (("crafter", DO_ID), ("harder", None)):
        env = blank_env(env_id, space)
        _face_object(env, kind)
        action = action if action is not None else env.action_names.index(named)
        runs.append([env.step(action) for _ in range(steps)])
    for (obs_do, r_do, *_, info_do), (obs_named, r_named, *_, info_named) in zip(*runs):
        assert np.array_equal(obs_do.pop("image"), obs_named.pop("image"))
        assert np.array_equal(info_do.pop("player_pos"), info_named.pop("player_pos"))
        assert (obs_do, r_do, info_do) == (obs_named, r_named, info_named)
    first = runs[0][0][-1]
    assert first["action_name"] == named
    if kind == "grass":
        assert any(info["unlocked"] == ["collect_sapling"] for *_, info in runs[0])
    if kind in ("tree", "water", "ripe plant", "cow", "zombie"):  # a real effect at once
        assert first["effective_success"] and first["transition_caption"] == named
    if kind in ("stone", "plant"):  # no pickaxe; an unripe sapling
        assert not first["effective_success"]
        assert first["transition_caption"] == (named if env_id.endswith("v1") else "")


@pytest.mark.parametrize("env_id", ["CrafterTextEnv-v1", "CrafterTextEnv-v2"])
@pytest.mark.parametrize("material", ["sand", "path", "table"])
def test_do_facing_nothing_it_acts_on_fails_and_changes_nothing(env_id, material):
    """Crafter's ``do`` on sand, path or a table does nothing; it keeps the name "do", fails
    both success flags and leaves no caption, as a named action on the wrong target does."""
    env = blank_env(env_id, target=material)
    inventory = dict(env.player.inventory)
    _, reward, _, _, info = env.step(DO_ID)
    assert info["action_name"] == "do" and info["transition_caption"] == ""
    assert not info["effective_success"] and not info["plausible_success"]
    assert env.world[below(env)][0] == material and reward == 0.0
    assert {k: v for k, v in env.player.inventory.items() if k not in ("food", "drink")} == {
        k: v for k, v in inventory.items() if k not in ("food", "drink")}


def test_the_game_counts_do_as_every_action_it_carries_out():
    from ellm.games.crafter import CrafterGame

    spec = validate(_config("env_spec.action_space_type=crafter", "env_spec.novelty_goals=all"))
    game = CrafterGame()
    vocabulary = game.goal_vocabulary(spec)
    assert {"chop tree", "attack cow", "mine diamond", "place furnace"} <= set(vocabulary)
    assert "do" not in vocabulary and "move left" not in vocabulary
    goals = game.novelty_goals(spec)
    assert len(goals) == 17 + len(acts.DO_NAMES) and goals[5:7] == ("do", "eat plant")
    harder = validate(_config("env_spec.novelty_goals=all"))
    assert game.novelty_goals(harder) == acts.HARDER_ACTIONS


def _config(*overrides):
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_the_random_method_draws_uniformly_over_the_17_actions():
    cfg = _config("preset=cpu_medium", "env_spec.name=CrafterTextEnv-v2", "method=random",
                  "env_spec.action_space_type=crafter", "seed=1")
    spec = validate(cfg)
    assert spec.method.name == "random" and not spec.method.learns
    env = spec.game.make_env(spec, 1)
    assert env.action_space.n == 17
    agent = make_agent(spec, num_actions=env.action_space.n,
                       device=torch.device("cpu"), embedder=None, strings=None,
                       hold_epsilon=False, seed=1)
    obs = {"frames": np.zeros((cfg.frame_stack, 84, 84), np.uint8)}
    for eval_mode in (False, True):
        counts = np.bincount([agent.act(obs, 10**6, eval_mode) for _ in range(3400)],
                             minlength=17)
        assert len(counts) == 17 and counts.min() > 130 and counts.max() < 270
