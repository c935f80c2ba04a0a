"""The language-feedback environments keep LLF-Bench's contract (docs/llf.md)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import pytest
from conftest import ROOT

import text_crafter
import text_housekeep
from llm_in_the_loop.llf.policies import parse_action
from text_crafter.llf import CrafterLLF
from text_game.llf import (
    FEEDBACK_KINDS,
    FEEDBACK_TYPES,
    INSTRUCTION_TYPES,
    MAX_ACTION_CHARS,
    NO_OP,
    feedback_kinds,
    normalise_action,
    not_an_action,
)
from text_housekeep.llf import HousekeepLLF

CRAFTER, HOUSEKEEP = text_crafter.LLF_ENV_ID, text_housekeep.LLF_ENV_ID
KEYS = {"observation", "instruction", "feedback"}
TEN_MB = 10_000_000
PEER = ROOT.parent / "shared" / "peers" / "llf-bench"  # LLF-Bench's tests, beside the checkout
# LLF-Bench's pins (its README there): it runs in a venv of its own, as its authors run it.
LLF_BENCH_REQUIREMENTS = ("gymnasium==0.29.1", "numpy<2", "crafter==1.8.3", "numba", "parse",
                          "tqdm")


def make(env_id: str, **kwargs):
    if env_id == HOUSEKEEP:
        kwargs.setdefault("ep_num", 0)
    return gym.make(env_id, **kwargs)


def advised(feedback: str | None, actions) -> str:
    """The action fp feedback advises: its last quoted valid action."""
    quoted = [a for a in re.findall(r'"([^"]+)"', feedback or "") if a in actions]
    return quoted[-1] if quoted else NO_OP


def follow(env, obs, steps: int):
    """Follow the fp advice for up to ``steps`` steps; the last step's return."""
    for _ in range(steps):
        out = env.step(advised(obs["feedback"], env.unwrapped.actions))
        obs = out[0]
        if out[2] or out[3]:
            break
    return out


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
def test_registered_and_keeps_the_contract(env_id):
    assert env_id in gym.registry
    env = make(env_id)
    obs, info = env.reset(seed=0)
    assert set(obs) == KEYS
    assert isinstance(obs["observation"], str) and obs["observation"]
    assert isinstance(obs["instruction"], str) and obs["instruction"]
    assert obs["feedback"] is None and info["success"] is False
    obs, reward, terminated, truncated, info = env.step(NO_OP)
    assert set(obs) == KEYS and obs["instruction"] is None
    assert isinstance(obs["observation"], str) and isinstance(obs["feedback"], str)
    assert isinstance(reward, float)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert info["success"] is False and info["valid_action"] is True


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
def test_bad_arguments_name_the_valid_values(env_id):
    with pytest.raises(ValueError, match="instruction_type='x' is invalid: expected one of b, p, c"):
        make(env_id, instruction_type="x")
    with pytest.raises(ValueError, match="feedback_type='hq' is invalid"):
        make(env_id, feedback_type="hq")


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
@pytest.mark.parametrize("length", [0, -3, 2.5, "10", True, None])
def test_a_length_that_is_not_a_positive_int_is_refused(env_id, length):
    with pytest.raises(ValueError, match=re.escape(
            f"length={length!r} is invalid: expected an integer >= 1")):
        make(env_id, length=length)


def test_bad_task_and_episode_are_refused():
    with pytest.raises(ValueError, match="task='fly to the moon' is invalid"):
        gym.make(CRAFTER, task="fly to the moon")
    with pytest.raises(ValueError, match="ep_num=100000 is invalid"):
        gym.make(HOUSEKEEP, ep_num=100000)


def test_feedback_types():
    assert feedback_kinds("a") == feedback_kinds("m") == ("r", "hp", "hn", "fp", "fn")
    assert feedback_kinds("n") == ()
    assert feedback_kinds(["fp", "hn"]) == feedback_kinds({"fp", "hn"}) == ("hn", "fp")
    assert set(FEEDBACK_TYPES) == {"r", "hp", "hn", "fp", "fn", "a", "m", "n"}
    assert normalise_action('  "Chop   Tree."  ') == "chop tree"


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
def test_step_before_reset_and_after_the_end_raise_clearly(env_id):
    env = make(env_id, length=2)
    with pytest.raises(RuntimeError, match=r"before reset\(\)"):
        env.step(NO_OP)
    env.reset(seed=1)
    env.step(NO_OP)
    *_, truncated, _ = env.step(NO_OP)
    assert truncated
    with pytest.raises(RuntimeError, match=r"after the episode ended"):
        env.step(NO_OP)
    obs, _ = env.reset(seed=1)  # a new episode starts normally
    assert obs["feedback"] is None


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
@pytest.mark.parametrize("action", ["fly away", "", 42, None, "pick the moon"])
def test_an_unusable_action_gets_the_notice_and_a_no_op(env_id, action):
    env = make(env_id, feedback_type="hn")
    env.reset(seed=2)
    out = env.step(action)
    assert "is not an action, so nothing was done" in out[0]["feedback"]
    assert out[-1]["valid_action"] is False and out[-1]["action"] == NO_OP
    reference = make(env_id, feedback_type="hn")
    reference.reset(seed=2)
    assert out[0]["observation"] == reference.step(NO_OP)[0]["observation"]


def no_op_feedback(env_id: str, feedback_type: str) -> str | None:
    """The first step's feedback for the no-op, at seed 2."""
    env = make(env_id, feedback_type=feedback_type)
    env.reset(seed=2)
    return env.step(NO_OP)[0]["feedback"]


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
@pytest.mark.parametrize("feedback_type", FEEDBACK_TYPES)
def test_a_non_action_gets_the_notice_under_every_feedback_type(env_id, feedback_type):
    env = make(env_id, feedback_type=feedback_type)
    env.reset(seed=2)
    feedback = env.step("fly away")[0]["feedback"]
    notice = ("'fly away' is not an action, so nothing was done. Answer with exactly one action "
              "of the instruction's list.")
    rest = no_op_feedback(env_id, feedback_type)
    assert feedback == (f"{notice} {rest}" if rest else notice)


class Unprintable:
    def __str__(self) -> str:
        raise ValueError("no text here")


class SlyText(str):
    """A str whose methods raise: the env reads its plain text."""

    def __str__(self) -> str:
        raise ValueError("no text here")

    def lower(self) -> str:
        raise ValueError("no lower case here")


def deep_list(depth: int = 100_000) -> list:
    nested: list = []
    for _ in range(depth):
        nested = [nested]
    return nested


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
@pytest.mark.parametrize("action", [deep_list(), Unprintable()], ids=["deep_list", "raising_str"])
def test_an_object_with_no_text_gets_the_notice_and_a_no_op(env_id, action):
    env = make(env_id, feedback_type="n")
    env.reset(seed=2)
    obs, *_, info = env.step(action)
    assert obs["feedback"] == not_an_action(None)
    assert obs["feedback"].startswith("An object with no text is not an action, so nothing was")
    assert info["valid_action"] is False and info["action"] == NO_OP


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
def test_a_str_subclass_is_read_as_its_plain_text(env_id):
    env = make(env_id)
    env.reset(seed=2)
    info = env.step(SlyText(" Do Nothing. "))[-1]
    assert info["valid_action"] is True and info["action"] == NO_OP


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
def test_a_ten_megabyte_action_is_not_an_action(env_id):
    env = make(env_id, feedback_type="n")
    env.reset(seed=2)
    for action in ["chop tree " * (TEN_MB // 10), NO_OP + " " * TEN_MB]:
        obs, *_, info = env.step(action)
        assert obs["feedback"] == not_an_action(action)
        assert obs["feedback"].startswith(repr(action[:57] + "...") + " is not an action")
        assert info["valid_action"] is False


def test_only_a_bounded_prefix_of_an_action_is_read():
    line = "I would Chop Tree, " + "then chop tree " * (TEN_MB // 15)
    normalised = normalise_action(line)
    assert normalised == normalise_action(line[:MAX_ACTION_CHARS]) + " ..."
    assert len(normalised) <= MAX_ACTION_CHARS + 4
    assert normalise_action(NO_OP + " " * MAX_ACTION_CHARS) == f"{NO_OP} ..."
    assert normalise_action(NO_OP + " " * (MAX_ACTION_CHARS - len(NO_OP))) == NO_OP
    actions = make(CRAFTER).unwrapped.actions
    assert parse_action(line, actions) == "chop tree"
    assert parse_action("x" * TEN_MB + " chop tree", actions) is None
    assert parse_action(NO_OP + " " * TEN_MB, actions) == NO_OP


def test_crafter_feedback_per_type():
    def first_steps(feedback_type, actions, task="make wood pickaxe"):
        env = make(CRAFTER, task=task, feedback_type=feedback_type)
        env.reset(seed=3)
        return env, [env.step(a)[0]["feedback"] for a in actions]

    actions = ["chop tree", "move left", "move left", "move left", "move left", "chop tree"]
    _, none = first_steps("n", actions)
    assert none == [""] * len(actions)
    _, r = first_steps("r", actions)
    assert all(t == "You received no reward." for t in r)
    _, hn = first_steps("hn", actions)
    assert hn[0] == '"chop tree" had no effect: you face grass, not a tree.'
    _, hp = first_steps("hp", actions)
    assert hp[-1] == "You unlocked collect wood. You got 1 wood."
    env, fp = first_steps("fp", actions[:1])
    assert fp[0].startswith('Next step: "chop tree"; a tree is ')
    assert advised(fp[0], env.unwrapped.actions).startswith("move ")
    _, everything = first_steps("a", actions)
    assert everything[-1].startswith("You received no reward. You unlocked collect wood.")
    assert 'Next step: "chop tree"' in everything[-1]
    # "m": one kind of the step's feedback, drawn at random.
    _, mixed = first_steps("m", actions[:1])
    parts = [r[0], hn[0], fp[0]]
    assert mixed[0] in parts


def test_crafter_warns_of_hazards_and_low_needs():
    env = make(CRAFTER, feedback_type="fn")
    env.reset(seed=3)
    env.unwrapped.player.inventory["food"] = 2
    feedback = env.step(NO_OP)[0]["feedback"]
    assert "Your food is low (2/9)" in feedback


def test_following_fp_solves_a_crafter_task_and_pays_only_then():
    env = make(CRAFTER, task="make wood pickaxe", feedback_type="fp")
    obs, _ = env.reset(seed=3)
    obs, reward, terminated, truncated, info = follow(env, obs, 100)
    assert terminated and not truncated and info["success"]
    assert reward == 1.0
    stats = info["episode_stats"]
    assert stats["achievement_make_wood_pickaxe"] == 1 and stats["length"] < 100


def test_the_open_task_pays_one_per_new_achievement():
    env = make(CRAFTER, feedback_type="fp")
    obs, _ = env.reset(seed=3)
    assert "unlock as many achievements as you can" in obs["instruction"]
    total = 0.0
    for _ in range(30):
        obs, reward, *_, info = env.step(advised(obs["feedback"], env.unwrapped.actions))
        total += reward
    unlocked = sum(1 for n in info["achievements"].values() if n)
    assert total == unlocked >= 3 and not info["success"]


def test_an_in_order_custom_task_counts_its_steps():
    env = make(CRAFTER, task="deforestation", feedback_type="hp")
    obs, _ = env.reset(seed=3)
    for action in ["move left"] * 4 + ["chop tree"]:
        obs, *_ = env.step(action)
    assert obs["feedback"].startswith('"chop tree" completed step 1 of 5 of your task.')


def test_survival_succeeds_when_the_time_runs_out_alive():
    env = make(CRAFTER, task="survival", length=3)
    env.reset(seed=0)
    out = [env.step(NO_OP) for _ in range(3)][-1]
    assert out[1] == 1.0 and out[2] and out[-1]["success"]


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
def test_a_seed_replays_the_episode(env_id):
    def play(seed):
        env = make(env_id, instruction_type="p", feedback_type="m")
        obs, _ = env.reset(seed=seed)
        seen = [obs["instruction"], obs["observation"]]
        for i in range(8):
            obs, *_ = env.step(advised(obs["feedback"], env.unwrapped.actions) if i else NO_OP)
            seen += [obs["observation"], obs["feedback"]]
        return seen

    assert play(5) == play(5)
    assert play(5) != play(6)


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
def test_instruction_types(env_id):
    def instructions(kind):
        env = make(env_id, instruction_type=kind)
        return {env.reset(seed=s)[0]["instruction"] for s in range(8)}

    (basic,) = instructions("b")
    (partial,) = instructions("p")
    (complete,) = instructions("c")
    assert partial.startswith(basic) and complete.startswith(basic)
    if env_id == HOUSEKEEP:  # p: where the first half of the objects belong; c: all of them
        assert "Where some objects belong:" in partial and "Where each object belongs:" in complete
        some = partial.split("Where some objects belong: ")[1].rstrip(".").split("; ")
        every = complete.split("Where each object belongs: ")[1].rstrip(".").split("; ")
        assert some == every[:(len(every) + 1) // 2] and len(some) < len(every)
    else:  # p: the task's steps; c: also the rules of the game
        steps = 'Steps toward your task, in order: "chop tree", "place crafting table"'
        assert steps in partial and steps in complete
        assert "How the game works:" in complete and "How the game works:" not in partial


def test_housekeep_feedback_comes_from_the_ground_truth():
    env = make(HOUSEKEEP, feedback_type="fp")
    obs, _ = env.reset(seed=0)
    _, reward, terminated, truncated, info = follow(env, obs, 100)
    assert terminated and info["success"] and not truncated and reward == 1.0
    assert info["episode_stats"]["rearrange_success"] == 1.0

    env = make(HOUSEKEEP, feedback_type="a")
    obs, _ = env.reset(seed=0)
    truth = env.unwrapped.episode.correct
    obs, *_ = env.step(NO_OP)
    go = advised(re.sub(r"Do not.*", "", obs["feedback"]), env.unwrapped.actions)
    assert go.startswith("go to ")
    obs, *_ = env.step(go)
    pick = advised(obs["feedback"].split("Do not")[0], env.unwrapped.actions)
    obs, *_ = env.step(pick)
    assert obs["feedback"].startswith("You received no reward. You picked up the ")
    held = env.unwrapped.view.held
    wrong = next(r for r in range(len(env.unwrapped.recs)) if r not in truth[held])
    env.step(f"go to {env.unwrapped.recs[wrong]}")
    obs, *_ = env.step("place")
    assert f"does not belong on the {env.unwrapped.recs[wrong]}" in obs["feedback"]
    name = env.unwrapped.objs[held]
    right = env.unwrapped.recs[min(truth[held])]
    obs, *_ = env.step(f"pick {name}")
    assert f"You picked up the {name}, which did not belong on the " in obs["feedback"]
    env.step(f"go to {right}")
    obs, *_ = env.step("place")
    assert f"The {name} belongs on the {right}: well placed." in obs["feedback"]
    obs, *_ = env.step(f"pick {name}")
    assert f"The {name} was already where it belongs, on the {right}." in obs["feedback"]


@pytest.mark.parametrize(("game", "other"), [("text_crafter", "text_housekeep"),
                                             ("text_housekeep", "text_crafter")])
def test_a_game_imports_neither_the_other_game_nor_llm_or_rl_code(game, other):
    # A fresh interpreter: this test module has imported both games and the LLM policies.
    code = (f"import sys, {game}.llf; print(sorted({{m.split('.')[0] for m in sys.modules}} & "
            f"{{'{other}', 'llm_in_the_loop', 'ellm', 'baselines', 'torch', 'openai'}}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True, cwd=ROOT)
    assert proc.stdout.strip() == "[]", proc.stdout


# ---- LLF-Bench's semantics, and its own tests/test_envs.py ----------------------------------
@pytest.mark.parametrize(("env_id", "cls", "rewards"), [(CRAFTER, CrafterLLF, (0.0, 22.0)),
                                                         (HOUSEKEEP, HousekeepLLF, (-1.0, 1.0))])
def test_the_env_lists_its_types_and_bounds_as_llf_bench_reads_them(env_id, cls, rewards):
    env = make(env_id, visual=False)  # llfbench.make always passes visual
    assert type(env) is cls  # LLF-Bench is not installed here: no wrapper
    assert env.INSTRUCTION_TYPES == INSTRUCTION_TYPES == ("b", "p", "c")
    assert env.FEEDBACK_TYPES == FEEDBACK_KINDS == ("r", "hp", "hn", "fp", "fn")
    assert env.reward_range == rewards
    # The action space allows what the env reads of an action, and no more.
    assert env.action_space.max_length == MAX_ACTION_CHARS
    assert env.action_space.contains("x" * MAX_ACTION_CHARS)
    assert not env.action_space.contains("x" * (MAX_ACTION_CHARS + 1))
    with pytest.raises(ValueError, match="visual=True is invalid: these games have text "
                                         "observations only; expected False"):
        make(env_id, visual=True)


def test_a_task_pays_at_most_one():
    assert make(CRAFTER, task="make wood pickaxe").reward_range == (0.0, 1.0)


@pytest.mark.parametrize("env_id", [CRAFTER, HOUSEKEEP])
def test_setting_the_types_after_construction_takes_effect(env_id):
    env = make(env_id, feedback_type="n")
    env.reset(seed=2)
    assert env.step(NO_OP)[0]["feedback"] == ""  # no feedback is '' (LLF-Bench's), not None
    env.set_feedback_type("r")
    assert env.feedback_type == {"r"}  # a kind reads back as a set, as in LLF-Bench
    assert env.step(NO_OP)[0]["feedback"] == "You received no reward."
    env.feedback_type = ["hn", "r"]  # assigning is setting
    assert env.feedback_type == {"r", "hn"}
    assert env.step(NO_OP)[0]["feedback"] == "You received no reward."
    env.feedback_type = "m"
    assert env.feedback_type == "m"
    env.feedback_type = {"r"}
    env.set_instruction_type("c")  # from the next episode
    instruction = env.reset(seed=2)[0]["instruction"]
    assert env.instruction_type == "c" and instruction == make(
        env_id, instruction_type="c").reset(seed=2)[0]["instruction"]
    with pytest.raises(ValueError, match="feedback_type='hq' is invalid"):
        env.set_feedback_type("hq")
    with pytest.raises(ValueError, match="instruction_type='x' is invalid"):
        env.instruction_type = "x"
    assert (env.feedback_type, env.instruction_type) == ({"r"}, "c")


def test_llf_bench_without_its_requirements_is_an_error_not_a_plain_env(monkeypatch):
    # Where LLF-Bench is importable, gym.make wraps our env in its LLFWrapper class; an
    # LLF-Bench whose own imports fail must say so, not quietly give the unwrapped env.
    if not (PEER / "llfbench").is_dir():
        pytest.skip("LLF-Bench's files are not beside the checkout (shared/peers/llf-bench)")
    monkeypatch.syspath_prepend(str(PEER))
    monkeypatch.setitem(sys.modules, "parse", None)
    before = set(sys.modules)
    try:
        with pytest.raises(ModuleNotFoundError, match="parse"):
            make(CRAFTER)
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]


def llf_bench_python() -> Path:
    """A Python with LLF-Bench's requirements: ``$ELLM_LLF_BENCH_PYTHON``, else a venv built
    once from the package index into the user's cache; the test skips if that cannot be had."""
    if os.environ.get("ELLM_LLF_BENCH_PYTHON"):
        return Path(os.environ["ELLM_LLF_BENCH_PYTHON"])
    tag = hashlib.sha256(" ".join(LLF_BENCH_REQUIREMENTS).encode()).hexdigest()[:8]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ellm"
    venv = cache / f"llf-bench-venv-{tag}"
    if not (venv / "bin" / "python").exists():
        cache.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix="llf-bench-venv-", dir=cache))
        try:
            subprocess.run([sys.executable, "-m", "venv", str(build)], check=True,
                           capture_output=True, text=True, timeout=300)
            subprocess.run([str(build / "bin" / "python"), "-m", "pip", "install", "-q",
                            *LLF_BENCH_REQUIREMENTS], check=True, capture_output=True,
                           text=True, timeout=900)
        except subprocess.CalledProcessError as err:
            shutil.rmtree(build, ignore_errors=True)
            said = " ".join((err.stderr or "").strip().splitlines()[-1:])
            pytest.skip(f"LLF-Bench's requirements ({', '.join(LLF_BENCH_REQUIREMENTS)}) could "
                        f"not be installed: {said}")
        try:
            build.rename(venv)  # a venv runs from anywhere; a concurrent build may win
        except OSError:
            shutil.rmtree(build, ignore_errors=True)
    return venv / "bin" / "python"


@pytest.mark.e2e
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("prefix", ["llf-crafter", "llf-housekeep"])
def test_llf_benchs_own_env_tests_pass_unchanged(prefix):
    # Every instruction type x feedback type (24 configurations an id), LLF-Bench's wrapper
    # class, determinism over two runs: its tests/test_envs.py, run as its README says.
    if not (PEER / "tests" / "test_envs.py").exists():
        pytest.skip("LLF-Bench's tests are not beside the checkout (shared/peers/llf-bench)")
    proc = subprocess.run([str(llf_bench_python()), str(PEER / "run_llf_test_envs.py"), prefix],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    assert last.startswith(f"PASS llfbench-test_envs-{prefix}: LLF-Bench's tests/test_envs.py "
                           f"passed on {prefix}-v0"), proc.stdout[-3000:] + proc.stderr[-3000:]
