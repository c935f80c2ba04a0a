"""The config is checked once, in process, before anything is built: each bad value raises a
ConfigError naming its key; the run records its method and game; ignored keys are listed."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml
from conftest import PRETRAIN
from hydra import compose, initialize_config_dir

from ellm.agent.options import IGNORED_OPTIONS
from ellm.games import GAMES, find_game
from ellm.method import (
    ALIAS_METHODS,
    CRAFTAX_METHODS,
    METHODS,
    TORCH_METHODS,
    check_agent_alias,
    resolve_method,
)
from ellm.run.config import (
    AGENT_KEYS_AT_TOP,
    IGNORED_KEYS,
    ConfigError,
    RunOptions,
    agent_options,
    check_added_keys,
    resolve_threads,
    resolve_workers,
    validate,
)

ROOT = Path(__file__).resolve().parents[1]


def config(*overrides: str):
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("override, key", [
    ("num_train_frames=-5", "num_train_frames"),
    ("batch_size=abc", "batch_size"),
    ("discount=0", "discount"),
    ("torch_threads=0", "torch_threads"),
    ("num_actors=0", "num_actors"),
    ("actor_sync_frames=0", "actor_sync_frames"),
    ("replay_buffer_num_workers=-1", "replay_buffer_num_workers"),
    ("env_spec.name=CrafterTextEnv-v9", "env_spec.name"),
    ("env_spec.action_space_type=hard", "env_spec.action_space_type"),
    ("env_spec.threshold=2", "env_spec.threshold"),
    ("env_spec.single_task=fly", "env_spec.single_task"),
    ("env_spec.lm_spec.lm_class=Gpt4", "lm_class"),
    ("env_spec.lm_spec.temperature=hot", "temperature"),
    ("agent.train_eps_min=2", "agent.train_eps_min"),
    ("agent.hidden_dim=0", "agent.hidden_dim"),
    ("use_language_state=gru", "use_language_state"),
    ("finetune_settings=all", "finetune_settings"),
    ("save_video=True", "save_video"),
    ("finetune_snapshot=True", "snapshot_path"),
    ("device=tpu", "device"),
    ("env_spec.name=Housekeep", None),  # valid
    ("env_spec.name=Housekeep env_spec.housekeep_ep_num=5000", "env_spec.housekeep_ep_num"),
    ("env_spec.name=Housekeep env_spec.housekeep_task=rs_int", "rs_int"),
    ("env_spec.name=Housekeep single_goal_eval=True", "single_goal_eval"),
])
def test_a_bad_value_raises_naming_its_key(override, key):
    cfg = config(*override.split())
    if key is None:
        validate(cfg)
        return
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(cfg)


# An agent's keys are checked by the options dataclass of the class agent._target_ names.
@pytest.mark.parametrize("overrides, key", [
    (("agent=apt", "agent.rep_dim=-1"), "agent.rep_dim"),
    (("agent=rnd", "agent.noveld=yes"), "agent.noveld"),
    (("agent=noveld", "agent.noveld_alpha=-1"), "agent.noveld_alpha"),
    (("agent._target_=baselines.icm_apt.ICMAPTAgent", "+agent.knn_k=0"), "agent.knn_k"),
    (("agent=apt", "agent.knn_k=64"), "agent.knn_k=64 needs batch_size > 64"),
    (("agent=rnd", "nstep=5"), "nstep=5 is larger than frame_stack=4"),
    (("agent=rnd", "agent.use_language=True"), "agent.use_language=True needs"),
    (("agent=rnd", "agent.intrinsic_lr=0"), "agent.intrinsic_lr"),
    (("agent.reward_scale=big",), "agent.reward_scale"),
    (("agent.use_image=False",), "at least one input"),
    (("agent._target_=baselines.nothing.Agent",), "agent._target_"),
    (("agent._target_=ellm.run.config.RunOptions",), "Options dataclass"),
])
def test_agent_options_are_checked_by_the_class_agent_target_names(overrides, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        validate(config(*overrides))


@pytest.mark.parametrize("overrides", [
    ("agent=rnd",), ("agent=noveld", "use_language_state=sbert"), ("agent=apt",),
    ("agent._target_=baselines.rnd.RNDAgent", "+agent.rep_dim=16"), ("agent=dqn",),
    ("agent._target_=dqn.DQNAgent",),
])
def test_every_agent_config_is_valid(overrides):
    validate(config(*overrides))


def test_agent_keys_ignored_by_the_config_are_ignored_by_the_agent():
    assert {key.split(".", 1)[1] for key in IGNORED_KEYS
            if key.startswith("agent.")} == set(IGNORED_OPTIONS)


@pytest.mark.e2e
def test_a_bad_agent_option_stops_train_py_before_a_run_dir_exists(train, tmp_path):
    proc = train("agent=apt", "agent.rep_dim=-1", "exp_name=BAD", check=False, timeout=120,
                 extra_env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2
    assert "agent.rep_dim=-1 is invalid: expected an integer in [1, 4096]" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "exp_local").exists()


def test_cuda_without_a_gpu_is_refused(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ConfigError, match="device='cuda'.*no CUDA GPU"):
        validate(config("device=cuda"))


def test_the_default_config_is_valid_and_runs_crafter():
    assert validate(config()).game.name == "crafter"
    assert validate(config("env_spec.name=Housekeep")).game.name == "housekeep"


def test_each_env_name_finds_exactly_one_game():
    for game in GAMES:
        for env_id in game.env_ids:
            assert find_game(env_id) is game
    with pytest.raises(ConfigError, match="expected one of"):
        find_game("Pong-v5")


@pytest.mark.parametrize("overrides, method", [
    # Unnamed: the original config, whose agent sees pixels only.
    ((), "ellm-pixels"),
    (("env_spec.lm_spec.lm_class=GPTLanguageModel",), "ellm-pixels"),
    (("agent._target_=dqn.DQNAgent",), "ellm-pixels"),
    (("use_goal=True", "use_language_state=sbert"), "ellm"),
    (("method=ellm", "use_goal=False", "use_language_state=null"), "ellm-pixels"),
    # The method group, every method by name.
    *(((f"method={name}",), name) for name in TORCH_METHODS),
    # The original's spellings, a fixed table.
    (("env_spec.lm_spec.lm_class=BaselineModel",), "novelty"),
    (("agent=rnd",), "rnd"),
    (("agent=noveld",), "noveld"),
    (("agent=apt",), "apt"),
    (("agent._target_=baselines.rnd.RNDAgent",), "rnd"),
    (("agent._target_=baselines.rnd.RNDAgent", "+agent.noveld=True"), "noveld"),
    (("agent._target_=baselines.icm_apt.ICMAPTAgent",), "apt"),
    (("env_spec.name=CrafterReward-v1",), "extrinsic"),
    (("env_spec.name=Housekeep", "env_spec.lm_spec.lm_class=BaselineModel"), "novelty"),
    # Epsilon 1 no longer names random actions: method=random does.
    (("agent.train_eps_min=1", "agent.train_eps_max=1", "agent.eval_eps=1"), "ellm-pixels"),
    # A spelling that agrees with the method is no conflict.
    (("method=rnd", "agent=rnd"), "rnd"),
    # NovelD is RND's agent with a flag, as the docs spell it.
    (("agent=rnd", "agent.noveld=True"), "noveld"),
    (("method=rnd", "agent.noveld=True"), "noveld"),
    (("method=rnd", "env_spec.name=CrafterReward-v1"), "rnd"),
])
def test_the_method_is_the_one_chosen_or_spelled(overrides, method):
    cfg = config(*overrides)
    assert validate(cfg).method.name == resolve_method(cfg, validate(cfg).game).name == method


@pytest.mark.parametrize("overrides, message", [
    (("method=rnd", "agent._target_=baselines.icm_apt.ICMAPTAgent"),
     "method=rnd contradicts agent._target_="),
    (("method=random", "env_spec.lm_spec.lm_class=BaselineModel"),
     "method=random contradicts env_spec.lm_spec.lm_class='BaselineModel'"),
    (("method=extrinsic", "agent._target_=baselines.rnd.RNDAgent"),
     "which is the spelling of method=rnd"),
])
def test_a_spelling_that_contradicts_the_method_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(config(*overrides))


@pytest.mark.parametrize("overrides, message", [
    (("method=rnd", "agent=apt"), "agent=apt contradicts method=rnd"),
    (("agent=rnd", "method=extrinsic"), "agent=rnd contradicts method=extrinsic"),
    (("agent=dqn", "method=noveld"), "agent=dqn contradicts method=noveld"),
])
def test_an_agent_alias_that_contradicts_the_method_is_refused(overrides, message):
    # Hydra would keep the command line's method and drop the alias without a word.
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_agent_alias(overrides)


@pytest.mark.parametrize("overrides", [("agent=rnd",), ("agent=rnd", "method=rnd"),
                                       ("agent=dqn", "method=ellm"), ("method=apt",)])
def test_an_agent_alias_that_agrees_is_taken(overrides):
    check_agent_alias(overrides)


@pytest.mark.parametrize("name", ALIAS_METHODS)
def test_an_agent_alias_composes_its_method_exactly(name):
    assert config(f"agent={name}") == config(f"method={name}")


def test_every_method_has_its_config_beside_the_registry_and_one_engine_at_least():
    import ellm.method
    from ellm.conf import group_dir

    assert group_dir("method") == Path(ellm.method.__file__).parent
    assert {p.stem for p in group_dir("method").glob("*.yaml")} == set(METHODS)
    assert set(TORCH_METHODS) | set(CRAFTAX_METHODS) == set(METHODS)
    for name in METHODS:
        assert config(f"method={name}").method == name


def test_method_ellm_alone_is_the_papers_goal_conditioned_agent():
    cfg = config("method=ellm")
    assert (cfg.use_goal, cfg.use_language_state, cfg.agent.use_goal) == (True, "sbert", True)
    assert cfg.env_spec.lm_spec.lm_class == "SimpleOracle"
    named = config("method=ellm", "env_spec.lm_spec.lm_class=GPTLanguageModel")
    assert named.env_spec.lm_spec.lm_class == "GPTLanguageModel" and named.use_goal
    pixels = config("method=ellm-pixels")
    assert (pixels.use_goal, pixels.use_language_state) == (False, None)
    assert validate(pixels).method.name == "ellm-pixels"


ORIGINAL = ROOT.parent / "shared" / "seeds" / "ellm_original_README.txt"


@pytest.mark.skipif(not ORIGINAL.is_file(), reason="the original README is not beside the checkout")
def test_the_original_readme_commands_keep_their_agents():
    commands = [shlex.split(line.split("python train.py ", 1)[1]) for line in
                ORIGINAL.read_text().splitlines() if line.startswith("python train.py ")]
    inputs = []
    for words in commands:
        overrides = [w for w in words if "openai_key" not in w
                     and "path" not in w and "single_task" not in w]
        cfg = config(*overrides)
        inputs.append((cfg.use_goal, cfg.use_language_state))
    assert inputs == [
        (True, "sbert"), (True, "sbert"), (True, "sbert"), (True, "sbert"),
        (False, "sbert"), (False, "sbert"), (False, "sbert")]  # Housekeep: not goal-conditioned
    assert (config().use_goal, config().use_language_state) == (False, None)  # python train.py


def test_lm_keys_agree_in_config_yaml_the_dataclass_and_docs():
    import dataclasses

    from ellm.lm.config import LMSpec, parse_lm_spec

    block = config().env_spec.lm_spec
    table = (ROOT / "docs" / "lm.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE))
    fields = {f.name for f in dataclasses.fields(LMSpec)}
    assert set(block) == fields | {"openai_key", "all_goals"} <= documented
    assert parse_lm_spec(block) == LMSpec()  # one set of defaults
    price = config("env_spec.lm_spec.price=[1,2]").env_spec.lm_spec  # as docs/optimizers.md
    assert parse_lm_spec(price).price == (1.0, 2.0)


def test_what_each_method_makes_the_loop_do():
    assert METHODS["ellm"].goal_reward and not METHODS["ellm"].game_reward
    assert not METHODS["rnd"].goal_reward
    assert not METHODS["random"].learns and METHODS["random"].game_reward
    run = validate(config("method=rnd", "use_extr_rew=True", "agent.extr_rew_weight=0.5"))
    assert METHODS["rnd"].game_weight(run.run.use_extr_rew, run.agent) == 0.5
    assert METHODS["rnd"].game_weight(False, run.agent) is None
    assert METHODS["extrinsic"].game_weight(False, validate(config()).agent) == 1.0


def test_every_ignored_key_exists_and_says_so_in_config_yaml():
    text = (ROOT / "config.yaml").read_text()
    data = yaml.safe_load(text)
    for key in IGNORED_KEYS:
        node = data
        for part in key.split("."):
            node = node[part]  # KeyError: a listed key that config.yaml does not have
        assert node == IGNORED_KEYS[key][0][0], key  # config.yaml's value is the first quiet one
        indent = "  " * key.count(".")
        line = next(line for line in text.splitlines()
                    if line.startswith(f"{indent}{key.rsplit('.', 1)[-1]}:"))
        assert "accepted and ignored" in line, line


def test_an_ignored_key_set_to_a_value_it_will_not_honour_is_warned_once(caplog):
    with caplog.at_level(logging.WARNING, logger="ellm"):
        validate(config(*PRETRAIN))  # the original's command: use_sbert=True is what runs
    assert "accepted and ignored" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="ellm"):
        validate(config("train_log_every=100", "agent.vocab=7", "eval_video_goals=[a]"))
    lines = [m for r in caplog.records if "accepted and ignored" in (m := r.getMessage())]
    assert [line.partition(" is accepted and ignored: ")[::2] for line in lines] == [
        ("train_log_every=100", "training metrics are logged once per episode"),
        ("agent.vocab=7", "the original's word vocabulary (see vocab_size)"),
        ("eval_video_goals=['a']", "eval videos are not implemented")]


def test_auto_threads_leave_room_for_a_second_run():
    assert resolve_threads("auto", cpus=2) == 1
    assert resolve_threads("auto", cpus=16) == 8
    assert resolve_threads("auto", cpus=1) == 1
    assert resolve_threads(3, cpus=2) == 3


def test_auto_replay_workers_fit_the_machine():
    # torch warns when a DataLoader has more workers than CPUs; 0 or 1 sample in process
    assert resolve_workers("auto", cpus=2) == 1
    assert resolve_workers("auto", cpus=4) == 2
    assert resolve_workers("auto", cpus=32) == 4
    assert resolve_workers(5, cpus=2) == 5


@pytest.mark.parametrize("overrides, added", [
    # the original README's spellings, and keys a schema documents beyond config.yaml
    (("agent._target_=baselines.rnd.RNDAgent", "+agent.noveld=True"), ["agent.noveld"]),
    (("agent._target_=baselines.icm_apt.ICMAPTAgent", "+agent.use_language=True"),
     ["agent.use_language"]),
    (("++env_spec.lm_spec.price=[1.0,2.0]",), ["env_spec.lm_spec.price"]),
])
def test_keys_a_schema_knows_may_be_added(overrides, added):
    check_added_keys(config(*overrides), added)


@pytest.mark.parametrize("overrides, added, closest", [
    (("+num_train_frame=100",), ["num_train_frame"], "num_train_frames"),
    (("+env_spec.lm_spec.budgett=3",), ["env_spec.lm_spec.budgett"], "env_spec.lm_spec.budget"),
    (("+agent.train_eps_mim=0.1",), ["agent.train_eps_mim"], "agent.train_eps_min"),
])
def test_an_added_key_nothing_reads_is_refused_with_the_closest_known(overrides, added,
                                                                      closest):
    with pytest.raises(ConfigError, match=f"{added[0]} is not a key.*did you mean {closest}"):
        check_added_keys(config(*overrides), added)


@pytest.mark.parametrize("group, chosen", [("dqn", {}), ("rnd", {}), ("noveld", {"noveld": True}),
                                           ("apt", {})])
def test_the_agent_yaml_and_its_options_dataclass_agree(group, chosen):
    """Each agent's keys are declared twice, in its YAML (what a run gets) and in its options
    dataclass (what an agent built in Python gets): the two must not drift apart; ``chosen``
    is what a group is for (NovelD is RND's class with noveld=True)."""
    import dataclasses

    from omegaconf import OmegaConf

    from ellm.run.config import _agent_schema

    cfg = config("device=cpu", f"agent={group}")
    block = OmegaConf.to_container(cfg.agent, resolve=True)
    schema = _agent_schema(cfg)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    built = {"_target_", "obs_shape", "num_actions", "device"}  # filled in by the code
    assert set(block) - set(fields) - built - set(IGNORED_OPTIONS) == set()
    assert set(fields) - set(block) == set(), f"{schema.__name__} keys missing from agent/{group}"
    differ = {name: (block[name], f.default) for name, f in fields.items()
              if f.default is not dataclasses.MISSING and block[name] != f.default}
    assert differ == {name: (value, fields[name].default) for name, value in chosen.items()}, \
        f"agent/{group}.yaml against {schema.__name__}: {differ}"


@pytest.mark.parametrize("name", ["CrafterTextEnv-v2", "Housekeep-v2"])
def test_the_goal_source_asks_the_parsed_lm_spec_not_the_raw_config(name):
    """The LM spec is parsed once, by validate: a game builds its suggester from it."""
    cfg = config(f"env_spec.name={name}", "env_spec.lm_spec.lm_class=SimpleOracle")
    run = validate(cfg)
    cfg.env_spec.lm_spec.lm_class = "BaselineModel"  # what a re-parse of the raw config would see
    goals, _ = run.game.goals(run, None, goal_reward=True)
    suggester = goals.suggester
    assert type(getattr(suggester, "answerer", suggester)).__name__ in (
        "SimpleOracle", "GroundTruthAnswers")


def test_a_config_files_legacy_key_reaches_a_client_built_from_the_parsed_spec(
        tmp_path, monkeypatch):
    from ellm.lm import build_client
    from ellm.lm import config as lm_config

    for env in ("OPENAI_API_KEY", lm_config.LEGACY_KEY_ENV):
        monkeypatch.setenv(env, "")  # so that the test's end restores it, however it was set
        monkeypatch.delenv(env)
    run = validate(config("env_spec.lm_spec.lm_class=GPTLanguageModel",
                          f"env_spec.lm_spec.cache_dir={tmp_path}",
                          "+env_spec.lm_spec.openai_key=sk-from-a-config-file"))
    assert "sk-from" not in repr(run.lm)  # the parsed spec holds no secret
    client = build_client(run.lm)
    assert client._openai is not None and client._openai.api_key == "sk-from-a-config-file"
    monkeypatch.delenv(lm_config.LEGACY_KEY_ENV)
    validate(config("env_spec.lm_spec.lm_class=SimpleOracle", "+env_spec.lm_spec.openai_key=sk-x"))
    assert lm_config.LEGACY_KEY_ENV not in os.environ  # a run that asks no LLM leaves it alone


def _method_agent_keys(method: str) -> dict:
    """The agent keys a method's yaml sets, those of the yamls it builds on included."""
    data = yaml.safe_load((ROOT / "ellm" / "method" / f"{method}.yaml").read_text())
    keys: dict = {}
    for base in data.get("defaults", []):
        if base != "_self_":
            keys.update(_method_agent_keys(base))
    at_top = {k: v for k, v in data.items() if k in AGENT_KEYS_AT_TOP}  # agent.x: ${x}
    return {**keys, **at_top, **(data.get("agent") or {})}


@pytest.mark.parametrize("method", [None, *TORCH_METHODS])
def test_an_agent_default_has_one_owner_the_options_dataclass(method):
    """config.yaml's agent block and the method yamls repeat no default of their own: a key is
    the options dataclass's default unless the method's yaml sets it (noveld, random)."""
    options = agent_options(config(*([f"method={method}"] if method else [])))
    defaults, own = type(options)(), _method_agent_keys(method) if method else {}
    for field in dataclasses.fields(options):
        expected = own.get(field.name, getattr(defaults, field.name))
        assert getattr(options, field.name) == expected, (method, field.name)


def test_config_yaml_and_the_lm_spec_dataclass_have_the_same_defaults():
    """A tool or test that builds a client from a partial mapping gets what train.py gets."""
    import dataclasses
    import json

    from ellm.lm import LMSpec, parse_lm_spec

    assert parse_lm_spec(config().env_spec.lm_spec) == LMSpec()
    for name, value in dataclasses.asdict(LMSpec()).items():
        # every default documented in docs/lm.md's table, as it is
        written = (str(value).lower() if isinstance(value, bool) else
                   "null" if value is None else value)
        if name == "max_num_goals":
            written = "all"
        doc = (ROOT / "docs" / "lm.md").read_text()
        table = doc[doc.index("## Configuration keys"):doc.index("## Secrets")]
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        cell = row.split("|")[2].strip().strip("`")
        assert cell in (str(written), json.dumps(written)), (name, cell, written)


@pytest.mark.parametrize(("override", "named"), [
    ("use_goal=maybe", "use_goal='maybe'"),
    ("use_image=1", "use_image=1"),
    ("lr=-1", "lr=-1"),
    ("other_model_prob=2", "other_model_prob=2"),
    ("use_language_state=bert", "use_language_state='bert'"),
    ("finetune_settings=all", "finetune_settings='all'"),
    ("agent.use_goal=maybe", "agent.use_goal='maybe'"),
])
def test_an_agent_key_set_at_top_level_is_checked_once_and_named_as_typed(override, named):
    """The six top-level keys the agent block takes (agent.x: ${x}) are the agent's options:
    checked there, once, and a bad value is named by the key the user set."""
    import dataclasses

    from ellm.run.config import RunOptions

    with pytest.raises(ConfigError) as err:
        validate(config(override))
    assert str(err.value).startswith(f"{named} is invalid: expected")
    top_level = {f.name for f in dataclasses.fields(RunOptions)}
    assert not top_level & {"use_goal", "use_image", "lr", "other_model_prob",
                            "use_language_state", "finetune_settings"}


@pytest.mark.parametrize("overrides", [
    ("use_goal=maybe", "agent.use_goal=true"),
    ("use_language_state=sbert", "agent.use_language_state=null"),
    ("other_model_prob=0.7", "agent.other_model_prob=0.1"),
])
def test_an_agent_key_set_apart_from_its_top_level_key_must_agree_with_it(overrides):
    """The rollout reads the top-level key, the agent its agent.* copy: they cannot differ."""
    name = overrides[0].split("=")[0]
    with pytest.raises(ConfigError, match=rf"agent\.{name}=.* and {name}=.* disagree"):
        validate(config(*overrides))
    validate(config(overrides[1], f"{name}={overrides[1].split('=')[1]}"))  # agreeing: fine


def train_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_entry", ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("override, closest", [
    ("num_train_frame=10", "num_train_frames"),
    ("env_spec.lm_spec.budgett=3", "env_spec.lm_spec.budget"),
])
def test_a_misspelled_key_gets_did_you_mean_on_the_first_try(override, closest, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_module().check_before_hydra([override])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"did you mean {closest}?" in err
    assert "To append to your config use +" not in err


def test_lm_keys_once_added_with_plus_still_may_be():
    argv = ["+env_spec.lm_spec.backoff=0", "+env_spec.lm_spec.price=[1,2]", "+agent.noveld=True",
            "agent=rnd"]
    assert train_module().check_before_hydra(argv) == [
        "++env_spec.lm_spec.backoff=0", "++env_spec.lm_spec.price=[1,2]", "++agent.noveld=True",
        "agent=rnd"]


def test_each_job_is_parsed_once_and_its_lines_reach_its_log(monkeypatch, caplog, tmp_path):
    """check_before_hydra parses each job; the job Hydra then runs in this process takes that
    spec and logs the lines its check held back, rather than parsing again."""
    import ellm.craftax.options
    import ellm.run.config

    calls = []
    for module, name in ((ellm.run.config, "validate"), (ellm.craftax.options, "parse_spec")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda cfg, real=real: calls.append(cfg) or real(cfg))
    train = train_module()
    argv = ["-m", "method=rnd", "use_goal=True", "seed=1,2"]
    assert train.check_before_hydra(argv) == argv
    assert len(calls) == 2 and not caplog.records  # held back: no run log exists yet
    with caplog.at_level(logging.INFO):
        specs = [train.checked_spec(config("method=rnd", "use_goal=True", f"seed={seed}"),
                                    tmp_path) for seed in (2, 1)]
    assert len(calls) == 2 and [s.run.seed for s in specs] == [2, 1]
    assert caplog.text.count("use_goal=True with method=rnd") == 2  # once per job
    train.check_before_hydra(["env_spec.name=Craftax-Classic-v1", "method=ellm"])
    spec = train.checked_spec(config("env_spec.name=Craftax-Classic-v1", "method=ellm"), tmp_path)
    assert len(calls) == 3 and spec.method == "ellm" and spec.basics.exp_name == "something_default"


def test_a_novelty_baseline_that_reads_goals_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="ellm"):
        validate(config("method=rnd", "use_goal=True"))
    assert "use_goal=True with method=rnd: its agent reads goals that pay it nothing" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ellm"):
        validate(config("method=rnd"))
        validate(config("method=ellm"))
    assert "use_goal=True" not in caplog.text


def test_a_longer_resume_says_the_replay_keeps_its_capacity(monkeypatch, caplog, tmp_path):
    from ellm.run import resume

    recorded = {"config": {"num_train_frames": 240, "replay_buffer_size": 240}}
    monkeypatch.setattr(resume.checkpoint, "resolve", lambda path, key: tmp_path)
    monkeypatch.setattr(resume.checkpoint, "load", lambda path: ({}, recorded))
    cfg = config(f"snapshot_path={tmp_path}", "num_train_frames=480")
    with caplog.at_level(logging.WARNING, logger="ellm"):
        out = resume.resumed_config(cfg, ["num_train_frames=480"])
    assert (out.num_train_frames, out.replay_buffer_size) == (480, 240)
    assert ("replay_buffer_size stays the snapshot's 240, below num_train_frames=480"
            in caplog.text)


@pytest.mark.e2e
def test_a_python_without_the_projects_packages_gets_one_line():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-S", str(ROOT / "train.py"), "seed=1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and ".venv/bin/python train.py" in proc.stderr


@pytest.mark.parametrize("snapshot_path, finetune, resumes_it", [
    (None, False, False), ("", False, False), ("null", False, False),
    ("runs/a", False, True), ("runs/a", "False", True),
    ("runs/a", True, False), ("runs/a", "True", False),
])
def test_one_rule_says_whether_a_run_resumes_its_snapshot(snapshot_path, finetune, resumes_it):
    from omegaconf import OmegaConf

    from ellm.conf import resumes
    from ellm.run.resume import resuming

    assert resumes(snapshot_path, finetune) is resumes_it
    cfg = OmegaConf.create({"snapshot_path": snapshot_path, "finetune_snapshot": finetune})
    assert resuming(cfg) is resumes_it


def test_validate_hands_on_the_run_and_env_options_it_parsed():
    cfg = config("num_train_frames=1234", "seed=7", "env_spec.length=77")
    spec = validate(cfg)
    assert (spec.run.num_train_frames, spec.run.seed, spec.env.length) == (1234, 7, 77)
    assert spec.env.name == cfg.env_spec.name and spec.run.snapshot_path is None


def test_the_workspace_reads_the_parsed_run_options_never_the_raw_config():
    source = (ROOT / "ellm" / "loop" / "workspace.py").read_text()
    raw = set(re.findall(r"\bcfg\.(\w+)", source))
    assert raw, "the pattern found the remaining raw reads (the builders still take cfg)"
    assert not raw & {f.name for f in dataclasses.fields(RunOptions)}, sorted(raw)


@pytest.mark.slow  # runs git
def test_a_record_names_the_commit_of_this_checkout():
    import subprocess

    from ellm.run.command_line import code_commit

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert code_commit() in (head, f"{head}+dirty")


def test_an_agent_alias_names_its_method_on_the_craftax_engine_too():
    argv = ["agent=rnd", "env_spec.name=Craftax-Classic-v1"]
    assert train_module().check_before_hydra(argv) == argv
    assert config(*argv).method == "rnd"


@pytest.mark.parametrize("argv, key", [
    (["env_spec.name=Craftax-Classic-v1", "env_spec.text_obs=True"], "env_spec.text_obs"),
    (["env_spec.name=Craftax-Classic-v1", "frame_stack=2"], "frame_stack"),
    (["craftax.hidden=32"], "craftax.hidden"),
])
def test_a_key_of_the_other_engine_is_refused_by_name(argv, key, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_module().check_before_hydra(argv)
    assert exit_.value.code == 2 and f"{key} is a key of the" in capsys.readouterr().err


def test_config_yaml_keeps_the_env_options_defaults():
    from ellm.run.spec import EnvOptions

    given = config().env_spec
    for field in dataclasses.fields(EnvOptions):
        if field.default is not dataclasses.MISSING:
            assert given[field.name] == field.default, field.name
