"""The paper setting (``-v1`` ids, the default config) behaves as the original ELLM code did.

Each test states a fact about the original (github yuqingd/ellm at e068cf4, FIDELITY.md) and
pins it on a concrete case, so that a later change cannot drift back; the fixed setting
(``-v2``) is checked beside it where it differs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crafter import objects
from hydra import compose, initialize_config_dir
from test_text_crafter import at, blank_env, step_named

from ellm.errors import ConfigError
from ellm.games.crafter.oracle import SimpleOracle
from ellm.games.crafter.state import TextState
from ellm.goals import goal_text
from ellm.lm import parse_lm_spec
from ellm.run.config import agent_target, validate
from text_crafter import ACTION_SPACES, GOOD_ACTIONS

ROOT = Path(__file__).resolve().parents[1]


def config(*overrides: str):
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def oracle(caption: str, inventory: str = "", status: str = "", **counts: int) -> list[str]:
    return SimpleOracle().suggest(TextState(caption, inventory, status, counts))


# ---------------------------------------------------------------- game rules (rows 1, 10)

def test_v1_one_wood_facing_grass_place_crafting_table_succeeds():
    """The original's rule data: a table costs 1 wood (upstream Crafter: 2)."""
    for env_id, placed in (("CrafterTextEnv-v1", True), ("CrafterTextEnv-v2", False)):
        env = blank_env(env_id)
        env.player.inventory["wood"] = 1
        _, _, _, _, info = step_named(env, "place crafting table")
        assert (env.world[at(env, 0, 1)][0] == "table") is placed, env_id
        assert info["effective_success"] is placed
        assert env.player.inventory["wood"] == (0 if placed else 1)


def test_v1_mining_stone_with_9_stone_gives_none_but_leaves_path():
    """The original changes the world before it finds the item full."""
    env = blank_env()
    env.world[at(env, 0, 1)] = "stone"
    env.player.inventory.update(wood_pickaxe=1, stone=9)
    step_named(env, "mine stone")
    assert env.world[at(env, 0, 1)][0] == "path"
    assert env.player.inventory["stone"] == 9
    assert env.player.achievements["collect_stone"] == 0


def test_v1_drinking_when_full_resets_thirst_without_a_collect():
    env = blank_env()
    env.world[at(env, 0, 1)] = "water"
    env.player._thirst = 15
    step_named(env, "drink water")
    assert env.player._thirst < 15  # reset to 0, then one step of thirst
    assert env.player.achievements["collect_drink"] == 0


def test_crafter_no_reward_v1_pays_nothing_but_counts_achievements():
    env = blank_env("CrafterNoReward-v1")
    env.world[at(env, 0, 1)] = "tree"
    _, reward, _, _, info = step_named(env, "chop tree")
    assert reward == 0.0 and info["unlocked"] == ["collect_wood"]


# ---------------------------------------------------------------- success gate (row 7)

def test_v1_a_held_sapling_is_not_a_plant_for_the_gate():
    """The original compares the noun with inventory keys: "plant" is not one (sapling is)."""
    for env_id, plausible in (("CrafterTextEnv-v1", False), ("CrafterTextEnv-v2", True)):
        env = blank_env(env_id, material="sand")
        env.player.inventory["sapling"] = 1
        _, _, _, _, info = step_named(env, "eat plant")
        assert info["plausible_success"] is plausible, env_id


def test_v1_a_faced_table_is_not_a_crafting_table_for_the_gate():
    """The table's material is named "table"; the noun "crafting table" never matches it."""
    for env_id, plausible in (("CrafterTextEnv-v1", False), ("CrafterTextEnv-v2", True)):
        env = blank_env(env_id)
        env.world[at(env, 0, 1)] = "table"
        _, _, _, _, info = step_named(env, "place crafting table")  # no wood: no effect
        assert info["effective_success"] is False
        assert info["plausible_success"] is plausible, env_id


def test_v1_a_sleeping_players_action_is_sleep_so_only_sleep_succeeds():
    env = blank_env()
    env.world.add(objects.Cow(env.world, at(env, 0, 1)))
    env.player.sleeping, env.player.inventory["energy"] = True, 3
    _, _, _, _, info = step_named(env, "attack cow")
    assert info["plausible_success"] is False and info["transition_caption"] == ""
    _, _, _, _, info = step_named(env, "sleep")
    assert info["plausible_success"] is True and info["transition_caption"] == "sleep"


# ---------------------------------------------------------------- the oracle (row 2)

def test_oracle_4_stone_no_table_in_view_suggests_place_furnace():
    assert "place furnace" in oracle("you see grass.", stone=4)
    assert "place furnace" not in oracle("you see grass, and table.", stone=3)


def test_oracle_1_wood_suggests_both_table_spellings_and_drops_only_place_when_one_is_seen():
    assert oracle("you see sand.", wood=1) == ["place crafting table", "make crafting table"]
    seen = oracle("you see crafting table, and grass. you are targeting table.", wood=1)
    assert "place crafting table" not in seen and "make crafting table" in seen
    assert "make wood pickaxe" in seen


def test_oracle_cow_in_view_suggests_attack_cow_and_eat_cow_in_that_order():
    assert oracle("you see cow, and grass.") == ["attack cow", "eat cow", "chop grass"]


def test_oracle_sapling_held_no_grass_in_view_suggests_place_plant():
    assert oracle("you see sand.", sapling=1) == ["place plant"]


def test_oracle_thirsty_without_water_in_view_suggests_no_drink():
    """The original looked for "thirsty" in the inventory sentence, which never says it."""
    assert "drink water" not in oracle("you see grass.", "", "you feel thirsty.")
    assert "drink water" in oracle("you see water.", "", "you feel thirsty.")


def test_oracle_sleep_only_when_sleepy_and_world_words_are_substrings():
    assert "sleep" in oracle("you see grass.", "", "you feel hungry, sleepy.")
    assert "sleep" not in oracle("you see grass.", "", "you feel hungry.")
    # "table" is read as a substring: the facing clause alone makes the tools available
    assert "make wood sword" in oracle("you see grass. you are targeting table.", wood=1)


def test_fixed_setting_oracle_keeps_to_the_upstream_rules():
    fixed = SimpleOracle(paper_setting=False)
    assert "place crafting table" not in fixed.suggest(
        TextState("You see grass.", "", "", {"wood": 1}))
    assert "eat cow" not in fixed.suggest(TextState("You see cow.", "", "", {}))


# ---------------------------------------------------------------- Novelty, goal text (rows 5, 9)

def novelty_goals(cfg) -> tuple[str, ...]:
    run = validate(cfg)
    return run.game.goals(run, None, True)[0].suggester.all_goals


def test_v1_novelty_suggests_all_139_harder_action_names():
    cfg = config("env_spec.lm_spec.lm_class=BaselineModel")
    goals = novelty_goals(cfg)
    assert len(goals) == 139 and goals == ACTION_SPACES["harder"]
    cfg = config("env_spec.lm_spec.lm_class=BaselineModel", "env_spec.name=CrafterTextEnv-v2")
    assert novelty_goals(cfg) == GOOD_ACTIONS


@pytest.mark.parametrize(("name", "choice", "expected"), [
    ("CrafterTextEnv-v1", "effective", GOOD_ACTIONS),
    ("CrafterTextEnv-v2", "all", ACTION_SPACES["harder"]),
])
def test_novelty_goals_key_overrides_the_setting(name, choice, expected):
    cfg = config("env_spec.lm_spec.lm_class=BaselineModel", f"env_spec.name={name}",
                 f"env_spec.novelty_goals={choice}")
    assert novelty_goals(cfg) == tuple(expected)
    with pytest.raises(ConfigError, match="env_spec.novelty_goals"):
        validate(config("env_spec.novelty_goals=some"))


def test_v1_goal_string_joins_goals_with_spaces():
    assert goal_text(["chop tree", "drink water"], paper_setting=True) == (
        "Your goal is: chop tree drink water.")
    assert goal_text([], paper_setting=True) == "Your goal is: ."
    cfg = config()
    run = validate(cfg)
    assert run.game.goal_text(run, ["chop tree"]) == "Your goal is: chop tree."


def test_crafter_reward_v1_shows_the_agent_no_goal():
    cfg = config("env_spec.name=CrafterReward-v1")
    run = validate(cfg)
    source, rewards = run.game.goals(run, None, goal_reward=False)
    assert rewards == []
    env = blank_env("CrafterReward-v1")
    env.world.add(objects.Cow(env.world, at(env, 1, 0)))
    obs, info = env.reset()
    assert source.reset(obs, info) == []


# ---------------------------------------------------------------- names of the original

def test_the_originals_class_names_are_accepted():
    assert agent_target(config("agent._target_=dqn.DQNAgent")) == "ellm.agent.DQNAgent"
    assert parse_lm_spec({"lm_class": "BaselineLM"}).lm_class == "Novelty"
    assert parse_lm_spec({"lm_class": "BaselineModel"}).lm_class == "Novelty"


@pytest.mark.parametrize("name", ["CrafterTextEnv-v1", "CrafterReward-v1", "CrafterNoReward-v1"])
def test_every_v1_id_is_the_paper_setting(name):
    cfg = config(f"env_spec.name={name}")
    assert validate(cfg).game.paper_setting(name)


# ---------------------------------------------------------------- hierarchical chains

def test_hierarchical_chains_are_the_originals():
    from ellm.games.crafter.task import TASK_CHAINS

    assert TASK_CHAINS["place crafting table"] == ("chop tree", "place crafting table")
    assert TASK_CHAINS["place furnace"][-5:] == ("mine stone",) * 4 + ("place furnace",)
    assert TASK_CHAINS["mine diamond"] == (
        "chop tree", "chop tree", "place crafting table", "make wood pickaxe", "mine stone",
        "make stone pickaxe", "mine stone", "place furnace", "mine coal", "mine iron",
        "make iron pickaxe", "mine diamond")
    assert TASK_CHAINS["make iron sword"][-2:] == ("mine iron", "make iron sword")
    assert TASK_CHAINS["mine iron"][-2:] == ("make stone pickaxe", "mine iron")


# ---------------------------------------------------------------- the agent (row 4)

def test_paper_setting_target_network_shares_the_online_encoder_and_only_heads_lag():
    import torch
    from test_agent import make_agent, make_batch

    paper = make_agent(None, use_goal=False, paper_setting=True,
                       critic_target_update_every_steps=10**9)
    for name in ("image_encoder", "fusion"):
        assert getattr(paper.target, name) is getattr(paper.online, name)
    assert paper.target.value is not paper.online.value
    heads = [p.clone() for p in paper.target.value.parameters()]
    paper.update(make_batch(), step=1)
    assert all(torch.equal(a, b) for a, b in zip(heads, paper.target.value.parameters()))
    assert not all(torch.equal(a, b) for a, b in
                   zip(heads, paper.online.value.parameters()))  # the online heads learned
    fixed = make_agent(None, use_goal=False, paper_setting=False)
    assert fixed.target.image_encoder is not fixed.online.image_encoder


# ---------------------------------------------------------------- the agent's text input (row 3)

@pytest.fixture(scope="module")
def sentence_embedder():
    from ellm.embed import SentenceEmbedder

    return SentenceEmbedder()


def _padded_layout_embedding(encoder, state: str, goal: str):
    """The original's computation written out: each text tokenised and zero-padded to
    max_seq_len, the two arrays concatenated, padding masked, mean-pooled, L2-normalised."""
    import torch

    def padded(text: str) -> list[int]:
        ids = encoder.tokenizer(text)["input_ids"][: encoder.max_tokens]
        return ids + [0] * (encoder.max_tokens - len(ids))

    ids = torch.tensor([padded(state) + padded(goal)])
    mask = (ids != 0).long()
    with torch.no_grad():
        tokens = encoder.model(input_ids=ids, attention_mask=mask)[0]
    pooled = (tokens * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
    return torch.nn.functional.normalize(pooled, dim=1)[0].numpy()


@pytest.mark.slow
def test_paper_text_input_is_state_and_goal_in_one_pass_of_the_padded_layout(sentence_embedder):
    import numpy as np

    from ellm.agent.paper_text_encoder import PaperTextEncoder

    encoder = PaperTextEncoder(sentence_embedder.model, max_tokens=200, reinit_seed=7)
    state, goal = "you see grass and tree. you have nothing in your inventory.", "chop tree"
    joint = encoder.embed([(state, goal)])[0]
    np.testing.assert_allclose(joint, _padded_layout_embedding(encoder, state, goal), atol=1e-5)
    assert abs(float(np.linalg.norm(joint)) - 1) < 1e-5
    # One pass over the pair: neither text's embedding alone, nor their average.
    alone = encoder.embed([(state,), (goal,)])
    assert float(joint @ alone[0]) < 0.999 and float(joint @ alone[1]) < 0.999


@pytest.mark.slow
def test_paper_text_encoder_reinitialises_every_linear_layer_and_nothing_else(sentence_embedder):
    import torch

    from ellm.agent.paper_text_encoder import PaperTextEncoder

    pretrained = dict(sentence_embedder.model[0].auto_model.named_parameters())
    encoder = PaperTextEncoder(sentence_embedder.model, reinit_seed=1)
    linear = {f"{m}.{p}" for m, mod in encoder.model.named_modules()
              if isinstance(mod, torch.nn.Linear) for p in ("weight", "bias")}
    assert len(linear) > 40
    for name, param in encoder.model.named_parameters():
        if name in linear and name.endswith("bias"):
            assert not param.any(), name
        elif name in linear:  # orthogonal rows (or columns) of norm 1
            w = param.detach()
            gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
            torch.testing.assert_close(gram, torch.eye(gram.shape[0]), atol=1e-4, rtol=0)
        else:  # token and position embeddings, LayerNorms: as pretrained
            assert torch.equal(param, pretrained[name]), name
    # The reward's sentence model is untouched; the switch keeps the pretrained weights.
    assert encoder.model is not sentence_embedder.model[0].auto_model
    assert PaperTextEncoder(sentence_embedder.model, reinit_seed=None).model is \
        sentence_embedder.model[0].auto_model
    same = PaperTextEncoder(sentence_embedder.model, reinit_seed=1).embed([("a cow",)])
    other = PaperTextEncoder(sentence_embedder.model, reinit_seed=2).embed([("a cow",)])
    assert (same == encoder.embed([("a cow",)])).all() and not (same == other).all()


@pytest.mark.slow
def test_paper_agent_feeds_one_joint_text_input_and_v2_keeps_two(sentence_embedder):
    import numpy as np
    from test_agent import make_agent, make_batch, make_obs

    paper = make_agent(sentence_embedder, use_goal=True, use_language_state="sbert",
                       paper_setting=True)
    assert paper.setting.text_input == "joint" and paper.setting.reinit_text_encoder
    assert paper.online.language_proj is not None and paper.online.goal_proj is None
    obs = make_obs()
    expected = paper.text.encoder.embed([(obs["text_obs"], obs["goal"])])
    language, goal = paper.text.of_obs(obs)
    np.testing.assert_array_equal(language.numpy(), expected)
    assert goal is None
    paper.update(make_batch(), step=4)  # the batch's (state, goal) id pairs embed jointly
    assert len(paper.text._pair_rows) > 0
    fixed = make_agent(sentence_embedder, use_goal=True, use_language_state="sbert",
                       paper_setting=False)
    assert fixed.text.encoder is None and fixed.online.goal_proj is not None
    assert fixed.setting.text_input == "separate"
    switched = make_agent(sentence_embedder, use_goal=True, use_language_state="sbert",
                          paper_setting=True, reinit_text_encoder=False)
    assert switched.setting.text_input == "joint" and switched.text.reinit_seed is None
    apart = make_agent(sentence_embedder, use_goal=True, use_language_state="sbert",
                       paper_setting=True, joint_text=False, reinit_text_encoder=False)
    assert apart.setting.text_input == "paper" and apart.text.reinit_seed is None
    assert apart.online.language_proj is not None and apart.online.goal_proj is not None
    joined = make_agent(sentence_embedder, use_goal=True, use_language_state="sbert",
                        paper_setting=False, joint_text=True)
    assert joined.setting.text_input == "joint"


@pytest.mark.slow
def test_a_finetuned_agent_embeds_with_the_pretrained_runs_random_transformer(sentence_embedder):
    import torch
    from test_agent import make_agent, make_obs

    kwargs = {"use_goal": True, "use_language_state": "sbert", "paper_setting": True}
    pretrained = make_agent(sentence_embedder, seed=1, **kwargs)
    finetuned = make_agent(sentence_embedder, seed=2, **kwargs)
    obs = make_obs()
    assert not torch.equal(pretrained.q_values(obs), finetuned.q_values(obs))
    finetuned.load_weights(pretrained.state_dict())
    assert finetuned.text.reinit_seed == pretrained.text.reinit_seed is not None
    torch.testing.assert_close(finetuned.q_values(obs), pretrained.q_values(obs))


# ---------------------------------------------------------------- replay sampling (row 11)

def test_paper_setting_replay_draws_an_episode_uniformly_and_never_starts_in_its_last_steps(
        tmp_path):
    import numpy as np
    from test_replay import GAMMA, Episodes

    from ellm.replay.sampling import EpisodeShard
    from ellm.replay.storage import list_episode_files, load_episode

    episodes = Episodes(tmp_path)
    short, long = episodes.write(6, terminal=True), episodes.write(94, terminal=False)
    shards = {}
    for per_episode in (True, False):
        shard = EpisodeShard(capacity=10**6, nstep=3, clip_reward=True, per_episode=per_episode)
        for f in list_episode_files(tmp_path):
            shard.add(f.index, load_episode(f.path))
        batch = shard.sample(np.random.default_rng(0), 2000, 4, GAMMA)
        seen = np.array(episodes.check(batch, nstep=3, stack=4))
        shards[per_episode] = (seen, batch)
    seen, batch = shards[True]
    assert 0.45 < np.mean(seen == short) < 0.55  # uniform over episodes, not transitions
    assert (np.asarray(batch.n_steps) == 3).all()  # a full window: never in the last 2 steps
    seen, _ = shards[False]
    assert np.mean(seen == short) < 0.12  # ours, fixed setting: 6 of 100 transitions
    assert long == 1


# ---------------------------------------------------------------- custom single tasks

def _task_step(env, task, name):
    _, _, _, _, info = step_named(env, name)
    return task(info["action_name"], info["effective_success"], info)


def test_plant_row_pays_a_sapling_planted_beside_a_plant_only():
    from ellm.games.crafter.task import SingleTaskReward

    env = blank_env()
    env.player.inventory["sapling"] = 2
    task = SingleTaskReward("plant row")
    assert _task_step(env, task, "place plant") == 0.0  # alone
    env.player.facing = (1, 0)  # the cell beside the first plant
    assert _task_step(env, task, "place plant") == 1.0


def test_make_workshop_pays_a_table_placed_beside_a_table():
    from ellm.games.crafter.task import SingleTaskReward

    env = blank_env()
    env.player.inventory["wood"] = 2
    task = SingleTaskReward("make workshop")
    assert _task_step(env, task, "place crafting table") == 0.0
    env.player.facing = (1, 0)
    assert _task_step(env, task, "make crafting table") == 1.0


def test_chop_grass_with_wood_pickaxe_pays_only_with_the_pickaxe_held():
    from ellm.games.crafter.task import SingleTaskReward

    task = SingleTaskReward("chop grass with wood pickaxe")
    for held, paid in ((0, 0.0), (1, 1.0)):
        env = blank_env()
        env.player.inventory["wood_pickaxe"] = held
        for _ in range(30):  # grass gives a sapling with probability 0.1: until it does
            _, _, _, _, info = step_named(env, "chop grass")
            if info["effective_success"]:
                break
        assert task(info["action_name"], True, info) == paid


def test_deforestation_vegetarianism_survival_are_paid_as_the_original_paid_them():
    from ellm.games.crafter.task import SURVIVAL_REWARD, SingleTaskReward

    trees = SingleTaskReward("deforestation")
    assert [trees("chop tree", True) for _ in range(5)] == [0.0] * 4 + [1.0]
    assert trees("drink water", True) == 1.0  # once done, every effective action pays
    veg = SingleTaskReward("vegetarianism")
    assert veg("chop grass", True) == 0.0  # water first
    assert (veg("drink water", True), veg("chop grass", True)) == (0.0, 1.0)
    survival = SingleTaskReward("survival")
    assert survival("attack zombie", False) == survival("noop", True) == SURVIVAL_REWARD


def test_task_name_tasks_pay_only_through_their_chain():
    """The original compared the action with the task's own name unless hierarchical."""
    from ellm.games.crafter.task import SingleTaskReward

    flat = SingleTaskReward("gardening")
    assert [flat(a, True) for a in ("chop grass", "chop tree", "place plant")] == [0.0] * 3
    chain = SingleTaskReward("gardening", hierarchical=True)
    assert [chain(a, True) for a in ("chop grass", "chop tree", "place plant")] == [1.0] * 3
    assert validate(config("env_spec.single_task='wilderness survival'")).game.name == "crafter"


# ---------------------------------------------------------------- Housekeep (row 15)

def test_housekeep_paper_setting_a_suggested_re_pick_pays_0_and_time_outs_are_terminal():
    import text_housekeep as th
    from ellm.games.housekeep.goals import (
        GroundTruthAnswers,
        HousekeepGoalReward,
        HousekeepGoals,
        HousekeepSuggester,
    )
    from ellm.reward import StepData

    paid = {}
    for paper in (True, False):
        env = th.make("pomaria_2_int", 0, action_mode="highlevel")
        source = HousekeepGoals(HousekeepSuggester(GroundTruthAnswers(), per_class=paper))
        reward = HousekeepGoalReward(paper_setting=paper)
        obs, info = env.reset()
        source.reset(obs, info)
        rewards = []
        for name in ("go to bathroom_0-toilet_25_0.urdf", "pick helmet_1",
                     "go to bathroom_0-table_7_0.urdf", "place", "pick helmet_1"):
            obs, _, _, _, info = env.step(env.action_names.index(name))
            value, achieved = reward.step(StepData(0, 0.0, info, source.goals))
            rewards.append(value)
            source.observe(obs, info, [achieved] if achieved else [])
        paid[paper] = rewards
    assert paid[True] == [0.0, 2.5, 0.0, -0.25, 0.0]  # the helmet is still a suggested pick
    assert paid[False] == [0.0, 2.5, 0.0, -0.25, -0.25]  # ours: its pick goal was retired

    for version, (terminated, truncated, discount) in ((1, (True, False, 0.0)),
                                                       (2, (False, True, 1.0))):
        env = th.make("pomaria_2_int", 0, action_mode="highlevel", length=1, version=version)
        env.reset()
        _, _, term, trunc, info = env.step(0)
        assert (term, trunc, info["discount"]) == (terminated, truncated, discount)
    cfg = config("env_spec.name=Housekeep-v2")
    game = validate(cfg).game
    assert game.name == "housekeep" and not game.paper_setting("Housekeep-v2")


# ---------------------------------------------------------------- the LM prompt (row 8)

def test_the_prompt_names_only_sleepiness_of_the_status_and_strict_parsing_is_an_option():
    from ellm.games.crafter.prompts import state_description
    from ellm.lm.bullets import parse_bullets

    state = TextState("You see tree.", "", "You feel hungry, thirsty, sleepy.")
    assert state_description(state) == "You see tree. You feel sleepy."
    answer = "Sure:\n- chop tree\n- drink water"
    assert parse_bullets(answer) == ["chop tree", "drink water"]
    assert parse_bullets(answer, strict=True) is None  # the original rejected the preamble
    assert parse_bullets("- chop tree\n- drink water", strict=True) == ["chop tree", "drink water"]
    assert parse_lm_spec({"strict_parsing": True}).strict_parsing is True


# ---------------------------------------------------------------- frames (row 12)

def _linear_resize(image, size):
    """A reference linear resize with half-pixel centres (cv2.INTER_LINEAR's convention)."""
    import numpy as np

    def axis(n_in):
        src = np.clip((np.arange(size) + 0.5) * n_in / size - 0.5, 0, n_in - 1)
        low = np.floor(src).astype(int)
        return low, np.minimum(low + 1, n_in - 1), src - low

    (r0, r1, wr), (c0, c1, wc) = axis(image.shape[0]), axis(image.shape[1])
    rows = image[r0] * (1 - wr)[:, None] + image[r1] * wr[:, None]
    return rows[:, c0] * (1 - wc) + rows[:, c1] * wc


def test_paper_frames_average_rgb_and_resize_linearly_then_truncate():
    import numpy as np

    from ellm.agent.frames import paper_gray84, to_gray84

    rgb = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    expected = _linear_resize(rgb.mean(axis=-1), 84).astype(np.uint8)
    ours = paper_gray84(rgb)
    assert ours.shape == (84, 84) and ours.dtype == np.uint8
    assert np.mean(ours == expected) > 0.99  # float32 here, float64 there: rare off-by-ones
    assert np.abs(ours.astype(int) - expected).max() <= 1
    assert np.mean(to_gray84(rgb) == expected) < 0.5  # the fixed setting's luma differs


# ---------------------------------------------------------------- RND / NovelD (row 6)

def test_paper_rnd_pays_one_normalised_reward_per_sample_from_the_dqn_encoder(tmp_path):
    import math

    import torch
    from test_baselines import NUM_ACTIONS, OBS_SHAPE, SMALL, roundtrip, sample, write_episodes

    from baselines.intrinsic import RunningMeanStd
    from baselines.paper_setting import PaperRND
    from baselines.rnd import RNDAgent

    write_episodes(tmp_path, [7, 5])
    batch = sample(tmp_path, batch_size=16)
    for noveld in (False, True):
        agent = RNDAgent(OBS_SHAPE, NUM_ACTIONS, paper_setting=True, noveld=noveld, **SMALL)
        (plugin,) = agent.rewards
        assert isinstance(plugin, PaperRND) and plugin.name == ("noveld" if noveld else "rnd")
        assert agent.options.noveld_alpha == 1.0  # the original's NovelD alpha
        features = agent.encoder_features(batch)
        with torch.no_grad():  # the DQN's own (fused) features of s and s'
            expected = agent.online.features(batch.obs, None, None)
        assert torch.equal(features["pixel"][0], expected)
        rnd = plugin.modules["pixel"]
        with torch.no_grad():
            e, e_next = rnd.error(features["pixel"][0]), rnd.error(features["pixel"][1])
        raw = torch.relu(e_next - e) if noveld else e
        stats = RunningMeanStd(prior_count=1e-4)
        stats.update(raw)
        reward, metrics = plugin.compute(batch)
        assert metrics[f"{plugin.name}_raw"] == pytest.approx(raw.mean().item(), abs=1e-6)
        assert torch.allclose(reward, raw / (math.sqrt(stats.var) + 1e-8), atol=1e-5)
        # The batch's spread, logged beside the cumulative std (the normaliser's memory).
        assert float(metrics[f"{plugin.name}_raw_batch_std"]) == pytest.approx(
            raw.std(unbiased=False).item(), rel=1e-5)
        assert reward.shape == (16,)  # one per sample: it stands for the n-step return
        metrics = agent.update(batch, 4)
        assert all(math.isfinite(v) for v in metrics.values())
        again = RNDAgent(OBS_SHAPE, NUM_ACTIONS, paper_setting=True, noveld=noveld,
                         **{**SMALL, "seed": 7})
        again.load_state_dict(roundtrip(agent.state_dict()))
        assert again.update(batch, 8) == agent.update(batch, 8)


def test_prior_running_variance_is_the_originals():
    import numpy as np
    import torch

    from baselines.intrinsic import RunningMeanStd

    stats, m, s, n = RunningMeanStd(prior_count=1e-4), 0.0, 1.0, 1e-4
    for batch in (np.array([1.0, 3.0]), np.array([2.0, 2.0, 8.0])):
        stats.update(torch.tensor(batch))
        delta, bs = batch.mean() - m, len(batch)
        s = (s * n + batch.var() * bs + delta**2 * n * bs / (n + bs)) / (n + bs)
        m, n = m + delta * bs / (n + bs), n + bs
    assert (stats.mean, stats.var, stats.count) == pytest.approx((m, s, n))


def test_paper_apt_particle_entropy_counts_the_point_itself_and_clips(tmp_path):
    import math

    import torch
    from test_baselines import NUM_ACTIONS, OBS_SHAPE, SMALL, roundtrip, sample, write_episodes

    from baselines.icm_apt import ICMAPTAgent
    from baselines.paper_setting import KNN_CLIP

    write_episodes(tmp_path, [9, 8])
    batch = sample(tmp_path, batch_size=16)
    agent = ICMAPTAgent(OBS_SHAPE, NUM_ACTIONS, paper_setting=True, knn_k=4, **SMALL)
    (plugin,) = agent.rewards
    assert plugin.name == "apt" and agent.options.icm_hidden_dim == 1024
    assert agent.options.language_weight == 1.0  # the original's
    features = agent.encoder_features(batch)
    with torch.no_grad():
        rep = plugin.modules["pixel"].encoder(features["pixel"][1])
    d = torch.cdist(rep, rep).topk(4, dim=1, largest=False).values
    assert torch.allclose(d[:, 0], torch.zeros(16), atol=1e-3)  # itself, at distance 0
    expected = torch.log1p(torch.clamp(d / d.mean() - KNN_CLIP, min=0).mean(dim=1))
    reward, _ = plugin.compute(batch)
    assert torch.allclose(reward, expected, atol=1e-4)  # first batch: the mean is its own
    metrics = agent.update(batch, 4)
    assert all(math.isfinite(v) for v in metrics.values())
    again = ICMAPTAgent(OBS_SHAPE, NUM_ACTIONS, paper_setting=True, knn_k=4,
                        **{**SMALL, "seed": 7})
    again.load_state_dict(roundtrip(agent.state_dict()))
    assert again.update(batch, 8) == agent.update(batch, 8)


def test_a_single_task_episode_succeeds_only_once_its_whole_task_is_done():
    from ellm.games.crafter.task import SingleTaskReward, TaskReward
    from ellm.reward import StepData

    def step(reward: TaskReward, action: str) -> float:
        return reward.step(StepData(0, 0.0, {"action_name": action, "effective_success": True},
                                    [])).value

    flat = TaskReward(SingleTaskReward("attack cow"))
    assert flat.episode_metrics() == {"task_success": 0.0}
    step(flat, "chop tree")
    assert flat.episode_metrics() == {"task_success": 0.0}
    step(flat, "attack cow")
    assert flat.episode_metrics() == {"task_success": 1.0}
    flat.task.reset()  # the goal source resets it with each episode
    assert flat.episode_metrics() == {"task_success": 0.0}
    chain = SingleTaskReward("place crafting table", hierarchical=True)
    assert len(chain.chain) > 1
    reward = TaskReward(chain)
    for action in chain.chain[:-1]:
        step(reward, action)
        assert reward.episode_metrics() == {"task_success": 0.0}, action
    step(reward, chain.chain[-1])
    assert reward.episode_metrics() == {"task_success": 1.0}
    assert TaskReward(SingleTaskReward("survival")).episode_metrics() == {}
