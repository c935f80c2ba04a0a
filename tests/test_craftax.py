"""The Craftax engine's pieces, exactly: Text-Craftax's captions against Text-Crafter's in the
same situations, the oracle's goal masks against the oracle itself, the goal table, the reward
table and the lambda-returns. One env step is compiled per session, at its smallest size."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from crafter import objects

from ellm.craftax.options import parse_spec
from ellm.craftax.pqn import Batch, lambda_returns
from ellm.games.craftax import goals as G
from ellm.games.craftax.reward import goal_reward
from ellm.games.crafter.oracle import SimpleOracle
from ellm.games.crafter.state import TextState
from text_craftax import NAMES, NO_PHRASE, PHRASES, Caption, describe, phrase_text
from text_craftax import make as make_craftax
from text_craftax.captions import caption
from text_craftax.vocab import ITEMS
from text_crafter import make as make_crafter
from text_crafter.actions import HARDER_ACTIONS

ACTION = {"noop": 0, "left": 1, "right": 2, "up": 3, "down": 4, "do": 5, "sleep": 6,
          "place_stone": 7, "place_table": 8, "place_furnace": 9, "place_plant": 10,
          "make_wood_pickaxe": 11}
BLOCK = {"grass": 2, "water": 3, "stone": 4, "tree": 5, "table": 11}


@pytest.fixture(scope="module")
def craftax():
    env = make_craftax("Craftax-Classic-v2", 400)
    _, state, _ = env.reset(jax.random.PRNGKey(3))
    return env, jax.jit(env.step), state


def _craftax_situation(base, facing: str, inventory: dict[str, int], energy: int = 9,
                       cow: bool = False):
    """The player faces right onto ``facing``, on grass, no mob near, holding ``inventory``."""
    r, c = (int(x) for x in base.player_position)
    grid = base.map.at[r - 3:r + 4, c - 4:c + 5].set(BLOCK["grass"])
    grid = grid.at[r, c + 1].set(BLOCK[facing])
    none = lambda mobs: mobs.replace(mask=jnp.zeros_like(mobs.mask))
    cows = none(base.cows)
    if cow:
        cows = cows.replace(mask=cows.mask.at[0].set(True),
                            position=cows.position.at[0].set(jnp.array([r, c + 1])),
                            health=cows.health.at[0].set(3))
    inv = base.inventory.replace(**{k: jnp.asarray(v, jnp.int32) for k, v in inventory.items()})
    return base.replace(map=grid, player_direction=jnp.int32(2), inventory=inv, cows=cows,
                        zombies=none(base.zombies), skeletons=none(base.skeletons),
                        arrows=none(base.arrows), player_energy=jnp.int32(energy),
                        is_sleeping=False)


def _crafter_phrase(facing: str, inventory: dict[str, int], action: str, energy: int = 9,
                    cow: bool = False) -> str:
    """The same situation in Text-Crafter (``CrafterTextEnv-v2``): its transition caption."""
    env = make_crafter("CrafterTextEnv-v2", seed=3)
    env.reset()
    world, player = env.world, env.player
    x, y = (int(v) for v in player.pos)
    for dx, dy in itertools.product(range(-4, 5), range(-3, 4)):
        cell = (x + dx, y + dy)
        if (dx, dy) != (0, 0) and world[cell][1] is not None:
            world.remove(world[cell][1])
        if (dx, dy) != (0, 0):
            world[cell] = "grass"
    world[(x + 1, y)] = facing
    if cow:
        world.add(objects.Cow(world, (x + 1, y)))
    player.facing = (1, 0)
    player.inventory.update(inventory)
    player.inventory["energy"] = energy
    _, _, _, _, info = env.step(HARDER_ACTIONS.index(action))
    return info["transition_caption"]


SITUATIONS = [  # (faced, inventory, craftax action, text-crafter action, expected phrase)
    ("tree", {}, "do", "chop tree", "chop tree"),
    ("water", {}, "do", "drink water", "drink water"),
    ("stone", {}, "do", "mine stone", ""),
    ("stone", {"wood_pickaxe": 1}, "do", "mine stone", "mine stone"),
    ("table", {"wood": 1}, "make_wood_pickaxe", "make wood pickaxe", "make wood pickaxe"),
    ("grass", {"wood": 5}, "place_table", "place crafting table", "place crafting table"),
    ("grass", {"stone": 1}, "place_stone", "place stone", "place stone"),
    ("grass", {}, "up", "move up", "move up"),
    ("grass", {}, "noop", "do nothing", "do nothing"),
    ("grass", {"cow": 1}, "do", "attack cow", "attack cow"),
]


@pytest.mark.parametrize("facing, inventory, action, crafter_action, phrase", SITUATIONS)
def test_both_captioners_give_the_same_phrase(craftax, facing, inventory, action,
                                              crafter_action, phrase):
    _env, step, base = craftax
    inventory = dict(inventory)
    cow = inventory.pop("cow", 0) > 0  # a cow stands on the faced cell
    state = _craftax_situation(base, facing, inventory, cow=cow)
    got = step(jax.random.PRNGKey(0), state, jnp.int32(ACTION[action]))
    assert phrase_text(int(got.phrase)) == phrase
    assert _crafter_phrase(facing, inventory, crafter_action, cow=cow) == phrase


def test_sleep_when_sleepy_in_both(craftax):
    _env, step, base = craftax
    got = step(jax.random.PRNGKey(0), _craftax_situation(base, "grass", {}, energy=2),
               jnp.int32(ACTION["sleep"]))
    assert phrase_text(int(got.phrase)) == "sleep"
    assert _crafter_phrase("grass", {}, "sleep", energy=2) == "sleep"


def test_a_state_caption_names_the_view_the_faced_thing_and_the_needs(craftax):
    _env, _, base = craftax
    state = _craftax_situation(base, "tree", {"wood": 2, "sapling": 1}, energy=3, cow=True)
    features = caption(state)
    text = describe(features, version=2)
    # The cow stands on the only tree: it hides it, as an object hides its cell in Crafter.
    assert text["caption"] == "You see cow and grass. You are targeting cow."
    assert text["inventory"] == "You have in your inventory plant, wood."
    assert text["status"] == "You feel sleepy."
    v1 = describe(features, version=1)
    assert v1["caption"] == "You see cow, and grass. You are targeting cow."
    two = Caption(seen=np.isin(NAMES, ["grass", "crafting table"]),
                  target=np.int32(NAMES.index("crafting table")),
                  items=np.zeros(len(ITEMS), np.int32), needs=np.zeros(4, bool))
    assert describe(two, 1)["caption"] == ("You see crafting table, and grass. "
                                           "You are targeting table.")
    assert describe(two, 2)["caption"] == ("You see crafting table and grass. "
                                           "You are targeting crafting table.")


def _random_captions(count: int, seed: int = 0) -> list[Caption]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        seen = rng.random(len(NAMES)) < 0.3
        target = int(rng.choice(np.flatnonzero(seen))) if seen.any() and rng.random() < 0.7 \
            else -1
        if target >= 0 and NAMES[target] in ("path", "lava"):
            target = -1
        out.append(Caption(seen=seen, target=np.int32(target),
                           items=rng.integers(0, 5, len(ITEMS)).astype(np.int32) * (
                               rng.random(len(ITEMS)) < 0.4),
                           needs=rng.random(4) < 0.3))
    return out


@pytest.mark.parametrize("paper", [True, False])
def test_the_goal_mask_is_the_oracle_s_goals(paper):
    rules = G.rule_arrays(paper)
    mask_of = jax.jit(lambda c: G.oracle_mask(rules, c))
    oracle = SimpleOracle(paper_setting=paper, novelty_bonus=False)
    for cap in _random_captions(300, seed=int(paper)):
        text = describe(cap, 1 if paper else 2)
        state = TextState(caption=text["caption"], inventory=text["inventory"],
                          status=text["status"],
                          inventory_counts=dict(zip(ITEMS, cap.items.tolist(), strict=True)))
        want = set(oracle.suggest(state))
        got = {G.GOALS[i] for i in np.flatnonzero(np.asarray(mask_of(cap)))}
        assert got == want, text


def test_a_caption_key_holds_what_the_prompt_reads():
    key_of = jax.jit(G.caption_key)
    keys = set()
    for cap in _random_captions(200, seed=7):
        key = np.asarray(key_of(cap))
        back = G.key_features(key)
        assert describe(back, 1) == describe(cap._replace(items=(cap.items > 0).astype(
            np.int32)), 1)
        keys.add(tuple(key))
    assert len(keys) > 150


def test_the_goal_table_answers_inside_jax_what_the_host_stored():
    table = G.GoalTable(8)
    keys = [(i * 977, i) for i in range(9)]
    for i, key in enumerate(keys[:8]):
        assert table.put(key, [i % len(G.GOALS)])
    assert not table.put(keys[8], [0]) and table.full_misses == 1  # no free slot in reach
    arrays = table.arrays()
    look = jax.jit(lambda k: G.lookup(arrays, k))
    for i, key in enumerate(keys[:8]):
        found, mask = look(jnp.asarray(key, jnp.int32))
        assert bool(found) and np.flatnonzero(np.asarray(mask)).tolist() == [i % len(G.GOALS)]
    found, mask = look(jnp.asarray(keys[8], jnp.int32))
    assert not bool(found) and not np.asarray(mask).any()
    with pytest.raises(ValueError, match="power of two"):
        G.GoalTable(12)


def test_the_host_and_device_hash_a_key_to_the_same_slot_silently():
    rng = np.random.default_rng(3)
    keys = np.concatenate([rng.integers(-2**31, 2**31, (200, 2)),
                           [[2**31 - 1, 2**31 - 1], [-1, -1], [0, 0]]]).astype(np.int32)
    device = np.asarray(G._slot(jnp.asarray(keys), 65536))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's uint32 overflow warning was printed mid-run
        host = [G._host_slot(key, 65536) for key in keys]
    assert host == device.tolist() and len(set(host)) > 150


def test_achieving_a_goal_retires_it_and_its_synonym():
    achieved = G.retire(jnp.zeros(len(G.GOALS), bool), jnp.int32(G.GOALS.index("attack cow")),
                        jnp.bool_(True))
    assert {G.GOALS[i] for i in np.flatnonzero(np.asarray(achieved))} == {"attack cow",
                                                                           "eat cow"}
    idx, outside = G.goal_indices(["Chop tree.", "collect wood", "eat cow"])
    assert [G.GOALS[i] for i in idx] == ["eat cow", "chop tree"] and outside == 1


def test_the_goal_reward_is_the_best_shown_goal():
    table = np.zeros((len(PHRASES), len(G.GOALS)), np.float32)
    chop, tree_goal, grass_goal = PHRASES.index("chop tree"), G.GOALS.index("chop tree"), \
        G.GOALS.index("chop grass")
    table[chop, tree_goal] = 0.999
    table[chop, grass_goal] = 0.995
    shown = jnp.zeros(len(G.GOALS), bool).at[tree_goal].set(True).at[grass_goal].set(True)
    value, best, hit = goal_reward(jnp.asarray(table), jnp.int32(chop), shown)
    assert float(value) == pytest.approx(0.999) and int(best) == tree_goal and bool(hit)
    value, _, hit = goal_reward(jnp.asarray(table), jnp.int32(NO_PHRASE), shown)
    assert float(value) == 0 and not bool(hit)
    value, _, hit = goal_reward(jnp.asarray(table), jnp.int32(chop),
                                jnp.zeros(len(G.GOALS), bool))
    assert float(value) == 0 and not bool(hit)


@pytest.mark.slow
def test_the_reward_table_is_goal_reward_s_numbers():
    from ellm.embed import SentenceEmbedder
    from ellm.games.craftax.reward import reward_table

    table = reward_table(SentenceEmbedder(), 0.99)
    for p, phrase in enumerate(PHRASES):
        for g, goal in enumerate(G.GOALS):
            same = phrase == goal or {phrase, goal} in ({"attack cow", "eat cow"},
                                                        {"place crafting table",
                                                         "make crafting table"})
            assert (table[p, g] > 0.99) == same, (phrase, goal)


def test_lambda_returns_by_hand():
    gamma, lam = 0.9, 0.5
    reward = jnp.array([[1.0], [0.0], [2.0], [0.5]])
    next_q = jnp.array([[3.0], [4.0], [5.0], [6.0]])
    terminated = jnp.array([[False], [False], [True], [False]])
    done = jnp.array([[False], [False], [True], [True]])  # step 3 truncated
    batch = Batch(None, None, None, reward, terminated, done, next_q)
    got = np.asarray(lambda_returns(batch, gamma, lam))[:, 0]
    g3 = 0.5 + gamma * 6.0                      # truncated: bootstrap from the true next state
    g2 = 2.0                                    # terminated: no bootstrap
    g1 = 0.0 + gamma * (lam * g2 + (1 - lam) * 4.0)
    g0 = 1.0 + gamma * (lam * g1 + (1 - lam) * 3.0)
    assert got == pytest.approx([g0, g1, g2, g3])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["novelty", "noveld", "e3b", "random"])
def test_every_method_compiles_and_updates(tmp_path, method):
    from hydra import compose, initialize_config_dir

    from ellm.craftax.loop import to_host
    from ellm.craftax.run import CraftaxRun

    root = Path(__file__).resolve().parents[1]
    with initialize_config_dir(str(root), version_base="1.3"):
        cfg = compose("config", overrides=[
            "env_spec.name=Craftax-Classic-v2", f"method={method}", "seeds=2",
            "craftax.num_envs=4", "craftax.num_steps=4", "craftax.hidden=8",
            "craftax.minibatches=2", "craftax.reset_worlds=2", "env_spec.length=20"])
    run = CraftaxRun(parse_spec(cfg), tmp_path)
    _states, (metrics, records) = to_host(run.engine.make_chunk(2)(run.states, run.tables))
    assert records["done"].shape == (2, 2, 4, 4)  # seeds, updates, steps, envs
    learns = method != "random"
    assert ("loss" in metrics) == learns
    for value in metrics.values():
        assert np.isfinite(value).all()
    assert ("bonus_loss" in metrics) == (method in ("noveld", "e3b"))
    if method == "random":
        assert (metrics["eps"] == 1.0).all()
    run.close()


def test_a_finetune_takes_the_pretrained_goal_width_and_weights(tmp_path):
    """Earlier runs embedded goals in 384 numbers, later ones in 24: the finetuned network is
    built as wide as the pretrained one, whose weights it starts from, seed for seed."""
    from hydra import compose, initialize_config_dir

    from ellm.craftax.pqn import QNetwork
    from ellm.craftax.run import CraftaxRun
    from ellm.craftax.snapshot import save_snapshot

    env = make_craftax("Craftax-Classic-v1", 30)
    net = QNetwork(env.num_actions, 32, 2)
    params = [net.init(jax.random.PRNGKey(s), jnp.zeros((1, env.obs_size)), jnp.zeros((1, 7)))
              for s in (3, 4)]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *params)
    pre = tmp_path / "pre"
    pre.mkdir()
    save_snapshot(pre / "snapshot.npz", (stacked, jnp.zeros(3)), 512,
                  {"engine": "craftax", "method": "ellm", "goal_source": "oracle",
                   "seeds_trained_together": [3, 4]}, {})
    (pre / "config.json").write_text('{"code_commit": "abc123"}')
    root = str(Path(__file__).resolve().parents[1])
    overrides = ["env_spec.name=Craftax-Classic-v1", "method=extrinsic", "craftax.hidden=32",
                 "craftax.num_envs=4", "env_spec.length=30", "finetune_snapshot=True",
                 f"snapshot_path={pre}"]
    with initialize_config_dir(config_dir=root, version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, "seed=4", "seeds=1"])
        wrong = compose("config", overrides=[*overrides, "seed=5", "seeds=1"])
    run = CraftaxRun(parse_spec(cfg), tmp_path / "run")
    assert run.pretrained["goal_dim"] == 7 and run.pretrained["code_commit"] == "abc123"
    assert run.tables.goal_emb.shape[1] == 7 and not run.tables.goal_emb.any()
    for got, want in zip(jax.tree_util.tree_leaves(run.states.params),
                         jax.tree_util.tree_leaves(params[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(got)[0], np.asarray(want))
    with pytest.raises(Exception, match=r"holds seeds \[3, 4\], not \[5\]"):
        CraftaxRun(parse_spec(wrong), tmp_path / "run5")


def test_a_resumed_runs_frames_per_second_counts_only_the_frames_it_trained():
    """A run resumed at 4M frames per seed that trains 1M more in 100 s ran at 10k frames/s per
    seed, not 50k: the snapshot's frames were trained by an earlier process."""
    from types import SimpleNamespace

    from ellm.craftax.run import CraftaxRun

    run = object.__new__(CraftaxRun)  # the counters only: no env, no compile
    run.spec = SimpleNamespace(seeds=(1, 2))
    run.frame, run.frames_trained, run.train_seconds = 5_000_000, 1_000_000, 100.0
    assert run.frames_per_s == 20_000
