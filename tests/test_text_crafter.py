"""Text-Crafter: captions, action ids, success flags, v1 rules, determinism, score."""

import math

import gymnasium
import numpy as np
import pytest
from crafter import objects

import text_crafter
from text_crafter import actions as acts
from text_crafter.stats import crafter_score, success_rates
from text_game.stats import StatsWriter, load_stats


def blank_env(env_id="CrafterTextEnv-v1", material="grass", **kwargs):
    """A reset env whose surroundings are one material with no creatures."""
    env = text_crafter.make(env_id, seed=0, **kwargs)
    env.reset()
    world, player = env.world, env.player
    for obj in list(world.objects):
        if obj is not player:
            world.remove(obj)
    x, y = player.pos
    for i in range(x - 8, x + 9):
        for j in range(y - 8, y + 9):
            world[(i, j)] = material
    player.facing = (0, 1)
    return env


def at(env, dx, dy):
    return (env.player.pos[0] + dx, env.player.pos[1] + dy)


def step_named(env, name):
    return env.step(env.action_names.index(name))


# ---------------------------------------------------------------- captions

def test_caption_cow_water_table_v1_and_v2():
    for env_id, target in [("CrafterTextEnv-v1", "table"), ("CrafterTextEnv-v2", "crafting table")]:
        env = blank_env(env_id)
        env.world.add(objects.Cow(env.world, at(env, 1, 0)))
        env.world[at(env, -2, 1)] = "water"
        env.world[at(env, 0, 1)] = "table"
        assert env.describe()["caption"] == (
            f"You see cow, crafting table, grass, and water. You are targeting {target}.")


def test_caption_two_names_and_empty_view():
    v1, v2 = blank_env("CrafterTextEnv-v1"), blank_env("CrafterTextEnv-v2")
    for env in (v1, v2):
        env.world[at(env, 3, -2)] = "tree"
    assert v1.describe()["caption"] == "You see grass, and tree. You are targeting grass."
    assert v2.describe()["caption"] == "You see grass and tree. You are targeting grass."
    v1, v2 = blank_env("CrafterTextEnv-v1", "sand"), blank_env("CrafterTextEnv-v2", "sand")
    assert v1.describe()["caption"] == "You see ."
    assert v2.describe()["caption"] == "You see nothing."


def test_caption_view_is_9_wide_7_tall_and_objects_hide_material():
    env = blank_env("CrafterTextEnv-v2", "sand")
    env.world[at(env, 4, 3)] = "stone"      # corner of the 9x7 view: seen
    env.world[at(env, 5, 0)] = "coal"       # one column outside: not seen
    env.world[at(env, 0, 4)] = "iron"       # one row outside: not seen
    env.world[at(env, -1, -1)] = "water"
    env.world.add(objects.Zombie(env.world, at(env, -1, -1), env.player))  # hides the water
    env.world.add(objects.Arrow(env.world, at(env, 2, 2), (1, 0)))        # never named
    assert env.describe()["caption"] == "You see stone and zombie."


def test_targeting_clause_objects_and_skipped_materials():
    env = blank_env("CrafterTextEnv-v1")
    env.world.add(objects.Zombie(env.world, at(env, 0, 1), env.player))
    assert env.describe()["caption"].endswith(" You are targeting zombie.")
    for material in ("path", "sand", "lava"):
        env = blank_env("CrafterTextEnv-v1")
        env.world[at(env, 0, 1)] = material
        assert "targeting" not in env.describe()["caption"]


def test_inventory_sentence_full_inventory():
    v1, v2 = blank_env("CrafterTextEnv-v1"), blank_env("CrafterTextEnv-v2")
    for env in (v1, v2):
        for item in ("sapling", "wood", "stone", "coal", "iron", "diamond", "wood_pickaxe",
                     "stone_pickaxe", "iron_pickaxe", "wood_sword", "stone_sword", "iron_sword"):
            env.player.inventory[item] = 3
    assert v1.describe()["inventory"] == (
        "You have in your inventory plant, wood, stone, coal, iron, diamond, wood_pickaxe, "
        "stone_pickaxe, iron_pickaxe, wood_sword, stone_sword, iron_sword.")
    assert v2.describe()["inventory"] == (
        "You have in your inventory plant, wood, stone, coal, iron, diamond, wood pickaxe, "
        "stone pickaxe, iron pickaxe, wood sword, stone sword, iron sword.")
    assert blank_env().describe()["inventory"] == ""


def test_status_sentence_and_text_observation():
    env = blank_env("CrafterTextEnv-v1")
    assert env.describe()["status"] == ""
    env.player.inventory.update(food=5, drink=3, energy=2)
    assert env.describe()["status"] == "You feel hungry, thirsty, sleepy."
    env.player.inventory.update(health=8)
    env.player.inventory["wood"] = 1
    text = env.describe()
    assert text["status"] == "You feel hurt, hungry, thirsty, sleepy."
    assert text["text_obs"] == (
        "you see grass. you are targeting grass. you have in your inventory wood. "
        "you feel hurt, hungry, thirsty, sleepy.")


# ---------------------------------------------------------------- actions

def test_action_id_layout_round_trip():
    assert len(acts.HARDER_ACTIONS) == 139 and len(acts.EASIER_ACTIONS) == 27
    assert acts.HARDER_ACTIONS[:6] == acts.VERB_ONLY
    assert acts.harder_id("mine", "zombie") == 6
    assert acts.harder_id("chop", "tree") == 6 + 3 * 19 + 3 == 66
    assert acts.HARDER_ACTIONS[66] == "chop tree"
    assert acts.HARDER_ACTIONS[138] == "make iron sword"
    for i, name in enumerate(acts.HARDER_ACTIONS):
        verb, noun = acts.split_harder_id(i)
        assert acts.harder_id(verb, noun) == i
        assert name == (verb if noun is None else f"{verb} {noun}")
    assert set(acts.GOOD_ACTIONS) <= set(acts.HARDER_ACTIONS)
    assert acts.same_action("eat cow", "attack cow")
    assert acts.same_action("place crafting table", "make crafting table")
    assert not acts.same_action("chop tree", "chop grass")
    easier = text_crafter.make("CrafterTextEnv-v1", action_space_type="easier")
    assert easier.action_space.n == 27 and easier.action_names[9] == "chop tree"


def test_bad_input_names_the_valid_choices():
    with pytest.raises(ValueError, match="CrafterTextEnv-v1"):
        text_crafter.make("CrafterTextEnv-v3")
    with pytest.raises(ValueError, match="easier"):
        text_crafter.make("CrafterTextEnv-v1", action_space_type="hard")
    env = blank_env()
    with pytest.raises(ValueError, match="0..138"):
        env.step(139)
    with pytest.raises(ValueError, match="integer"):
        env.step("chop tree")


def test_scripted_wood_pickaxe_sequence():
    env = blank_env("CrafterTextEnv-v1")
    for dx, dy in [(0, 1), (-1, 0), (1, 0)]:
        env.world[at(env, dx, dy)] = "tree"
    script = ["chop tree", "move left", "chop tree", "move right", "chop tree",
              "place crafting table", "make wood pickaxe"]
    seen = []
    for name in script:
        _, reward, terminated, truncated, info = step_named(env, name)
        assert not (terminated or truncated)
        seen.append((info["transition_caption"], info["effective_success"],
                     info["plausible_success"], info["unlocked"], reward))
    assert seen == [
        ("chop tree", True, True, ["collect_wood"], 1.0),
        ("", False, False, [], 0.0),         # blocked by the tree: turns, does not move
        ("chop tree", True, True, [], 0.0),  # collect_wood already unlocked
        ("", False, False, [], 0.0),
        ("chop tree", True, True, [], 0.0),
        ("place crafting table", True, True, ["place_table"], 1.0),
        ("make wood pickaxe", True, True, ["make_wood_pickaxe"], 1.0),
    ]
    # v1: 3 wood chopped, 1 for the table (the original's cost), 1 for the pickaxe
    assert env.player.inventory["wood_pickaxe"] == 1 and env.player.inventory["wood"] == 1
    assert env.world[at(env, 1, 0)][0] == "table"


def test_v1_plausible_quirk_and_v2_effective_gate():
    for env_id, caption in [("CrafterTextEnv-v1", "mine stone"), ("CrafterTextEnv-v2", "")]:
        env = blank_env(env_id)
        env.world[at(env, 0, 1)] = "stone"
        _, _, _, _, info = step_named(env, "mine stone")  # no pickaxe
        assert (info["effective_success"], info["plausible_success"]) == (False, True)
        assert info["transition_caption"] == caption
        assert env.world[at(env, 0, 1)][0] == "stone"
    env = blank_env("CrafterTextEnv-v1")
    _, _, _, _, info = step_named(env, "attack cow")  # faces grass, no cow anywhere
    assert (info["effective_success"], info["plausible_success"]) == (False, False)
    env = blank_env("CrafterTextEnv-v1")
    env.player.inventory["wood_pickaxe"] = 1
    _, _, _, _, info = step_named(env, "make wood pickaxe")  # no table: fails, but held
    assert (info["effective_success"], info["plausible_success"]) == (False, True)


def test_v1_rules_damage_and_collect_when_full():
    v1, v2 = blank_env("CrafterTextEnv-v1"), blank_env("CrafterTextEnv-v2")
    for env in (v1, v2):
        env.world.add(objects.Zombie(env.world, at(env, 0, 1), env.player))
    _, r1, _, _, info1 = step_named(v1, "attack zombie")
    _, _, _, _, info2 = step_named(v2, "attack zombie")
    assert info1["unlocked"] == ["defeat_zombie"] and r1 == 1.0
    assert info2["unlocked"] == [] and info2["effective_success"]  # hit for 1 of 5 health
    for env in (v1, v2):
        env.world[at(env, 0, 1)] = "water"
        for obj in list(env.world.objects):
            if obj is not env.player:
                env.world.remove(obj)
    _, _, _, _, info1 = step_named(v1, "drink water")  # drink is 9: collecting fails in v1
    _, _, _, _, info2 = step_named(v2, "drink water")
    assert v1.player.achievements["collect_drink"] == 0
    assert (info1["effective_success"], info1["plausible_success"]) == (False, True)
    assert info1["transition_caption"] == "drink water"
    assert v2.player.achievements["collect_drink"] == 1 and info2["effective_success"]


def test_v1_health_reward_is_zero_and_v2_keeps_it():
    v1, v2 = blank_env("CrafterTextEnv-v1"), blank_env("CrafterTextEnv-v2")
    for env in (v1, v2):
        env.player.health = 5
        env._engine._last_health = 5  # as if the player had been at 5 for a while
        env.player._recover = 25.5  # the next step regenerates one health point
    _, r1, _, _, _ = step_named(v1, "do nothing")
    _, r2, _, _, _ = step_named(v2, "do nothing")
    assert v1.player.health == 6 and v2.player.health == 6
    assert r1 == 0.0 and r2 == pytest.approx(0.1)


def test_timeout_is_terminal_in_v1_and_truncation_in_v2():
    for env_id, flags, discount in [("CrafterTextEnv-v1", (True, False), 0.0),
                                    ("CrafterTextEnv-v2", (False, True), 1.0)]:
        env = blank_env(env_id, length=3)
        for _ in range(3):
            _, _, terminated, truncated, info = step_named(env, "do nothing")
        assert (terminated, truncated) == flags and info["discount"] == discount
        assert info["episode_stats"]["length"] == 3


def test_death_terminates_with_discount_zero_and_dying_false_continues():
    for dying, done in [(True, True), (False, False)]:
        env = blank_env("CrafterTextEnv-v2", dying=dying)
        env.world[at(env, 0, 1)] = "lava"
        _, _, terminated, truncated, info = step_named(env, "move down")
        assert info["dead"] and terminated == done and not truncated
        assert info["discount"] == (0.0 if done else 1.0)


def test_seeded_determinism():
    def rollout():
        env = text_crafter.make("CrafterTextEnv-v1", seed=7)
        obs, _ = env.reset()
        frames, texts = [obs["image"]], [obs["text_obs"]]
        rng = np.random.default_rng(1)
        for _ in range(150):
            obs, _, term, trunc, info = env.step(int(rng.integers(139)))
            frames.append(obs["image"])
            texts.append((obs["text_obs"], info["transition_caption"]))
            if term or trunc:
                obs, _ = env.reset()
        return np.stack(frames), texts

    frames_a, texts_a = rollout()
    frames_b, texts_b = rollout()
    assert np.array_equal(frames_a, frames_b) and texts_a == texts_b
    assert len({t for t, _ in texts_a[1:]}) > 3  # the rollout actually went somewhere


def test_gymnasium_registration():
    env = gymnasium.make("CrafterTextEnv-v2", length=10, seed=1)
    obs, _ = env.reset(seed=1)
    assert obs["image"].shape == (64, 64, 3) and obs["caption"].startswith("You see")
    assert env.unwrapped.version == 2 and not env.unwrapped.extrinsic
    assert text_crafter.make("CrafterReward-v1").extrinsic


# ---------------------------------------------------------------- stats and score

def test_stats_file_success_rates_and_score(tmp_path):
    path = tmp_path / "stats.jsonl"
    writer = StatsWriter(path)
    writer.write({"length": 400, "reward": 1.0, "achievement_collect_wood": 1})
    writer.write({"length": 120, "reward": 2.0, "achievement_collect_wood": 2,
                  "achievement_place_table": 1})
    with path.open("a") as f:
        f.write('{"length": 3')  # a torn line from a crash
    episodes = load_stats(path)
    assert len(episodes) == 2
    rates = success_rates(episodes)
    assert len(rates) == 22
    assert rates["collect_wood"] == 100.0 and rates["place_table"] == 50.0
    assert sum(rates.values()) == 150.0
    # exp((ln 101 + ln 51 + 20 * ln 1) / 22) - 1
    assert crafter_score(rates) == pytest.approx(math.exp((4.61512052 + 3.93182563) / 22) - 1)
    assert crafter_score(rates) == pytest.approx(0.474763, abs=1e-6)
    assert crafter_score({name: 0.0 for name in rates}) == 0.0
    assert crafter_score({name: 100.0 for name in rates}) == pytest.approx(100.0)


def test_episode_stats_match_crafter_format():
    env = blank_env("CrafterTextEnv-v1", length=2)
    env.world[at(env, 0, 1)] = "tree"
    step_named(env, "chop tree")
    _, _, _, _, info = step_named(env, "do nothing")
    stats = info["episode_stats"]
    assert stats["length"] == 2 and stats["reward"] == 1.0
    assert stats["achievement_collect_wood"] == 1
    assert len([k for k in stats if k.startswith("achievement_")]) == 22


def test_episode_count_continues_the_world_sequence():
    """A resumed run sets the count back: its next world is the one an uninterrupted run gets."""
    uninterrupted = text_crafter.make("CrafterTextEnv-v1", seed=3)
    for _ in range(3):
        third, _ = uninterrupted.reset()
    resumed = text_crafter.make("CrafterTextEnv-v1", seed=3)
    resumed.episode_count = 2
    again, _ = resumed.reset()
    first, _ = text_crafter.make("CrafterTextEnv-v1", seed=3).reset()
    assert uninterrupted.episode_count == resumed.episode_count == 3
    assert np.array_equal(third["image"], again["image"]) and third["text_obs"] == again["text_obs"]
    assert not np.array_equal(third["image"], first["image"])
