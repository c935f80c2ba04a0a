"""Rule-based oracle, Novelty baseline, config validation and cross-process determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ellm.games.crafter.oracle import ORACLE_GOALS, SimpleOracle
from ellm.games.crafter.prompts import BulletPrompt, load_prompt, state_description
from ellm.games.crafter.state import TextState
from ellm.games.crafter.suggesters import build_suggester
from ellm.lm import LM_CLASSES, parse_lm_spec
from ellm.lm.bullets import parse_bullets
from ellm.lm.novelty import BaselineModel
from text_crafter import SYNONYMS
from text_crafter.actions import GOOD_ACTIONS

REPO = Path(__file__).resolve().parents[1]


def oracle(caption: str, status: str = "", **counts: int) -> list[str]:
    return SimpleOracle(paper_setting=False).suggest(TextState(caption, "", status, counts))


def test_oracle_goals_are_good_actions_in_a_fixed_order():
    assert set(ORACLE_GOALS) <= set(GOOD_ACTIONS)
    assert len(set(ORACLE_GOALS)) == len(ORACLE_GOALS) == 22


def test_oracle_world_things_without_inventory():
    caption = "You see cow, grass, plant, skeleton, tree, water, and zombie. You are targeting cow."
    assert oracle(caption) == ["eat plant", "attack zombie", "attack skeleton", "attack cow",
                               "chop tree", "drink water", "chop grass"]
    assert oracle("You see .") == []


def test_mining_needs_the_right_pickaxe():
    caption = "You see coal, diamond, iron, and stone. You are targeting stone."
    assert oracle(caption) == []
    assert oracle(caption, wood_pickaxe=1) == ["mine stone", "mine coal"]
    assert oracle(caption, stone_pickaxe=1) == ["mine iron"]
    assert oracle(caption, wood_pickaxe=1, stone_pickaxe=1, iron_pickaxe=1) == [
        "mine stone", "mine coal", "mine iron", "mine diamond"]


def test_placing_and_crafting_prerequisites():
    no_table = "You see grass. You are targeting grass."
    table = "You see crafting table and grass. You are targeting table."
    both = "You see crafting table, furnace, and grass. You are targeting furnace."
    assert oracle(no_table, wood=1) == ["chop grass"]  # upstream: a table costs 2 wood
    assert oracle(no_table, wood=2) == ["chop grass", "place crafting table"]
    assert oracle(table, wood=1) == ["chop grass", "make wood pickaxe", "make wood sword"]
    assert oracle(table, stone=1) == ["chop grass", "place stone"]  # a furnace costs 4 stone
    assert oracle(table, stone=4) == ["chop grass", "place stone", "place furnace"]
    assert oracle(no_table, stone=1) == ["chop grass", "place stone"]
    assert oracle(table, wood=1, stone=4, coal=1, iron=1) == [
        "chop grass", "place stone", "place furnace", "make wood pickaxe", "make stone pickaxe",
        "make wood sword", "make stone sword"]
    assert oracle(both, wood=1, coal=1, iron=1) == [
        "chop grass", "make wood pickaxe", "make iron pickaxe", "make wood sword",
        "make iron sword"]
    assert "make iron pickaxe" not in oracle(both, wood=1, iron=1)
    assert oracle(no_table, sapling=1) == ["chop grass", "place plant"]
    assert oracle("You see sand.", sapling=1) == []


def test_sleep_only_when_sleepy():
    assert oracle("You see sand.", "You feel hungry.") == []
    assert oracle("You see sand.", "You feel hungry, sleepy.") == ["sleep"]


def test_novelty_filter_with_synonyms_and_reset():
    lm = SimpleOracle(paper_setting=False, synonyms=SYNONYMS)
    state = TextState("You see cow and tree.", "", "", {})
    lm.mark_achieved("eat cow")
    assert lm.suggest(state) == ["chop tree"]
    lm.reset()
    assert lm.suggest(state) == ["attack cow", "chop tree"]
    off = SimpleOracle(paper_setting=False, novelty_bonus=False)
    off.mark_achieved("chop tree")
    assert off.suggest(state) == ["attack cow", "chop tree"]


def test_baseline_suggests_unachieved_goals_and_turns_gate_off():
    goals = ["chop tree", "drink water", "eat cow", "attack cow"]
    lm = BaselineModel(goals, synonyms=SYNONYMS)
    assert lm.uses_success_gate is False and SimpleOracle.uses_success_gate is True
    assert lm.suggest(TextState("You see .")) == goals
    lm.mark_achieved("attack cow")
    assert lm.suggest(TextState("You see .")) == ["chop tree", "drink water"]
    capped = build_suggester({"lm_class": "BaselineModel", "max_num_goals": 1},
                             all_goals=goals, cache_dir=None)
    capped.mark_achieved("chop tree")
    assert capped.suggest(TextState("x")) == ["drink water"]
    assert capped.metrics()["queries"] == 1


def test_spec_validation_errors_name_the_key():
    with pytest.raises(ValueError, match=r"env_spec\.lm_spec\.lm_class='Gpt' is invalid.*SimpleOracle"):
        build_suggester({"lm_class": "Gpt"}, all_goals=[], cache_dir=None)
    with pytest.raises(ValueError, match="prompt 'Fancy'.*BulletPrompt"):
        build_suggester({"lm_class": "GPTLanguageModel", "prompt": "Fancy", "dummy_lm": True},
                        all_goals=[], cache_dir=None)
    for bad, match in [({"endpoint": "edits"}, "endpoint"), ({"max_num_goals": 0}, "max_num_goals"),
                       ({"max_num_goals": "some"}, "max_num_goals"), ({"budget": -1}, "budget"),
                       ({"dummy_lm": "yes"}, "dummy_lm"), ({"prob_threshold": 2}, "prob_threshold"),
                       ({"lm_clas": "SimpleOracle"}, "unknown key"), ({"price": [1]}, "price")]:
        with pytest.raises(ValueError, match=match):
            parse_lm_spec(bad)
    assert LM_CLASSES == ("SimpleOracle", "GPTLanguageModel", "Novelty")
    assert parse_lm_spec({"lm_class": "GPTHousekeep"}).lm_class == "GPTLanguageModel"
    assert parse_lm_spec({"max_num_goals": "all"}).max_num_goals is None
    assert parse_lm_spec({"max_num_goals": 3, "dummy_lm": "True"}).max_num_goals == 3


def test_parse_bullets():
    assert parse_bullets("Sure:\n- Chop Tree\n* drink water.\n\n\u2022 eat cow\n- chop tree\n"
                         "You see a wolf.\n- eat wolf") == ["chop tree", "drink water", "eat cow"]
    assert parse_bullets("chop tree") is None
    assert parse_bullets("-\n- ") is None
    assert parse_bullets("") is None


def test_prompt_template_and_description(tmp_path):
    state = TextState("You see tree.", "You have in your inventory wood.", "You feel sleepy.")
    assert state_description(state) == ("You see tree. You have in your inventory wood. "
                                        "You feel sleepy.")
    assert state_description(TextState("You see tree.", "", "You feel hungry.")) == "You see tree."
    text = BulletPrompt().text(state)
    assert "sleep, eat, attack, chop, drink, place, make, mine" in text
    assert text.count("What do you do?") == 3
    template = tmp_path / "prompt.txt"
    template.write_text("Q: {state}\nA:")
    assert load_prompt("BulletPrompt", template).text(state).startswith("Q: You see tree.")
    template.write_text("no placeholder")
    with pytest.raises(ValueError, match="placeholder"):
        load_prompt("BulletPrompt", template)


CHILD = textwrap.dedent("""
    import json
    from ellm.games.crafter.oracle import SimpleOracle
    from ellm.games.crafter.state import TextState
    from ellm.lm.novelty import BaselineModel
    from text_crafter.actions import GOOD_ACTIONS
    caption = ("You see coal, cow, crafting table, diamond, furnace, grass, iron, plant, "
               "skeleton, stone, tree, water, and zombie.")
    counts = dict.fromkeys(["wood", "stone", "coal", "iron", "sapling", "wood_pickaxe",
                            "stone_pickaxe", "iron_pickaxe"], 1)
    from text_crafter import SYNONYMS
    lm = SimpleOracle(paper_setting=False, synonyms=SYNONYMS)
    lm.mark_achieved("eat cow")
    out = lm.suggest(TextState(caption, "", "You feel sleepy.", counts))
    print(json.dumps([out, BaselineModel(GOOD_ACTIONS).suggest(TextState(caption))]))
""")


def test_order_is_deterministic_across_hash_seeds():
    outputs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1"}
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                             check=False, env=env, cwd=REPO, timeout=120)
        assert out.returncode == 0, out.stderr
        outputs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert outputs[0] == outputs[1]
    oracle_goals, baseline_goals = outputs[0]
    assert oracle_goals == [g for g in ORACLE_GOALS  # 1 of each: no table or furnace to place
                            if g not in ("attack cow", "place crafting table", "place furnace")]
    assert baseline_goals == list(GOOD_ACTIONS)
