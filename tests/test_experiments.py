"""The seeds' experiments by name: ``experiment=props_tutorial`` on policy search and
``experiment=trace_notebook`` on code as policy set every key their documents set, a name
belongs to one entry point, and command-line overrides win over the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException

from llm_in_the_loop.code_policy import run as code_policy_run
from llm_in_the_loop.policy_search import run as policy_search_run

RUNS = {"policy_search": policy_search_run, "code_policy": code_policy_run}


def composed(entry: str, tmp_path: Path, *overrides: str) -> Any:
    """``llm_in_the_loop/ENTRY/conf/ENTRY.yaml`` as Hydra composes it for the command line."""
    with initialize_config_dir(str(RUNS[entry].CONFIG.parent), version_base="1.3"):
        return compose(entry, overrides=[f"env_spec.lm_spec.cache_dir={tmp_path}", *overrides])


def test_props_tutorial_is_the_tutorials_experiment(tmp_path):
    cfg = composed("policy_search", tmp_path, "experiment=props_tutorial")
    opts, spec = policy_search_run.validate(cfg)
    # The tutorial's hyperparameters (NUM_EPISODES, WARMUP_EPISODES, NUM_EVALUATION_EPISODES,
    # SEARCH_STD, MAX_TRAJ_COUNT, MAX_TRAJ_LENGTH, its 5 tries, "search between -7 and 7").
    assert (opts.iterations, opts.warmup_episodes, opts.num_eval_episodes) == (400, 20, 20)
    assert (opts.step_size, opts.prompt_entries, opts.reasks) == (1.0, 1000, 4)
    assert tuple(opts.param_range) == (-7, 7) and tuple(opts.warmup_range) == (-3, 3)
    assert opts.prompt_style == "tutorial" and opts.episodes_per_iteration == 1
    assert not opts.clip_proposals and opts.eval_each_proposal
    assert (spec.name, spec.max_episode_steps, spec.clip_action) == (
        "MountainCarContinuous-v0", 1000, False)
    assert cfg.env_spec.lm_spec.lm == "gpt-4o" and cfg.experiment == "props_tutorial"
    # Without the name, the defaults stay ours.
    plain = composed("policy_search", tmp_path)
    assert plain.experiment is None and plain.clip_proposals and plain.param_range is None


def test_trace_notebook_is_the_notebooks_experiment(tmp_path):
    cfg = composed("code_policy", tmp_path, "experiment=trace_notebook")
    cfg.sandbox = "none"  # validate() checks that the OS sandbox can start; not the point here
    opts, spec = code_policy_run.validate(cfg)
    assert (spec.name, spec.horizon, spec.feedback_type) == (
        "llf-metaworld-pick-place-v2", 30, "a")
    assert (opts.optimize_every, opts.seed, opts.iterations) == ("step", 0, 1)
    assert cfg.experiment == "trace_notebook"


def test_overrides_win_and_a_name_belongs_to_one_entry_point(tmp_path):
    cfg = composed("policy_search", tmp_path, "experiment=props_tutorial", "iterations=3",
                   "env_spec.max_episode_steps=50")
    assert cfg.iterations == 3 and cfg.env_spec.max_episode_steps == 50
    assert cfg.param_range == [-7, 7]
    with pytest.raises(MissingConfigException, match="props_tutorial"):
        composed("policy_search", tmp_path, "experiment=trace_notebook")
    with pytest.raises(MissingConfigException, match="trace_notebook"):
        composed("code_policy", tmp_path, "experiment=props_tutorial")


def test_props_tutorial_runs_from_its_name(tmp_path):
    # A tiny budget of the named experiment, random proposals: 1000-step episodes, answers
    # unclipped, each proposal evaluated.
    cfg = composed("policy_search", tmp_path, "experiment=props_tutorial", "optimizer=random",
                   "iterations=1", "warmup_episodes=1", "num_eval_episodes=1",
                   "progress_every_s=0")
    run = policy_search_run.PolicySearchRun(cfg, tmp_path / "run")
    run.run()
    assert run.task.env.spec.max_episode_steps == 1000
    record = (tmp_path / "run" / "config.json").read_text()
    assert '"experiment": "props_tutorial"' in record
    assert "eval_return" in (tmp_path / "run" / "iteration.csv").read_text()


@pytest.mark.parametrize("entry", sorted(RUNS))
def test_a_configs_folder_holds_no_folder_hydra_would_take_for_a_group_but_experiment(entry):
    # Beside the code, the sandbox/ package made sandbox=none a group override, refused.
    conf = RUNS[entry].CONFIG.parent
    assert [p.name for p in conf.iterdir() if p.is_dir() and p.name != "__pycache__"] == [
        "experiment"]


def test_sandbox_none_is_a_key_not_a_group(tmp_path):
    assert composed("code_policy", tmp_path, "sandbox=none").sandbox == "none"
