"""The API key goes only where it belongs: OpenAI's key to OpenAI's host, another endpoint's key
from the variable named for it, and no key, however it was written, into any file or record."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PRETRAIN, TINY, train_env

from ellm.errors import ConfigError
from ellm.lm import build_client
from ellm.lm import config as lm_config
from ellm.run.command_line import take_key_overrides

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-never-written-SECRET-7"


@pytest.mark.parametrize("arg, kept", [
    (f"openai_key={SECRET}", None),
    (f"env_spec.lm_spec.openai_key={SECRET}", None),
    (f"+env_spec.lm_spec.openai_key='{SECRET}'", None),
    (f"env_spec.lm_spec={{lm_class: GPTLanguageModel, openai_key: {SECRET}, lm: m}}",
     "env_spec.lm_spec={lm_class:'GPTLanguageModel',lm:'m'}"),
    (f"env_spec={{lm_spec: {{openai_key: '{SECRET}', budget: 2}}, length: 40}}",
     "env_spec={lm_spec:{budget:2},length:40}"),
    (f"+env_spec.lm_spec={{openai_key: {SECRET}}}", "+env_spec.lm_spec={}"),
    ("exp_name=openai_key_study", "exp_name=openai_key_study"),
])
def test_every_spelling_of_a_key_leaves_argv(arg, kept, monkeypatch):
    monkeypatch.delenv(lm_config.LEGACY_KEY_ENV, raising=False)
    out = take_key_overrides([arg, "seed=3"])
    assert out == ([kept] if kept else []) + ["seed=3"]
    assert SECRET not in " ".join(out)
    if "openai_key_study" not in arg:
        assert os.environ[lm_config.LEGACY_KEY_ENV] == SECRET


def test_a_key_that_cannot_be_taken_out_stops_the_run_without_naming_it():
    with pytest.raises(ConfigError) as err:
        take_key_overrides([f"env_spec.lm_spec.openai_key={SECRET},sk-other"])
    assert "env_spec.lm_spec.openai_key" in str(err.value) and SECRET not in str(err.value)


def test_openai_base_url_from_the_environment_never_gets_openai_s_key(server, tmp_path,
                                                                       monkeypatch, caplog):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    with caplog.at_level(logging.INFO, logger="ellm"):
        client = build_client({"lm_class": "GPTLanguageModel", "lm": "test-model"},
                              cache_dir=tmp_path / "cache")
    # The endpoint is the one the environment named, resolved once, and logged as such.
    assert client.spec.base_url == server.base_url
    assert str(client._openai.base_url).rstrip("/") == server.base_url.rstrip("/")
    assert client._openai.api_key != SECRET
    assert any("127.0.0.1 gets no API key ($ELLM_LM_API_KEY is unset)" in r.getMessage()
               for r in caplog.records)
    assert not any("OpenAI" in r.getMessage() and "gets" in r.getMessage()
                   for r in caplog.records)
    assert all(r.authorization != f"Bearer {SECRET}" for r in server.requests)


def test_another_endpoint_gets_only_the_variable_named_for_it(server, tmp_path, monkeypatch,
                                                               caplog):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv(lm_config.LEGACY_KEY_ENV, SECRET)  # a legacy key is OpenAI's too
    monkeypatch.setenv("MY_SERVER_KEY", "local-key-1")
    spec = {"lm_class": "GPTLanguageModel", "lm": "test-model", "base_url": server.base_url}
    assert build_client(spec, cache_dir=tmp_path / "c")._openai.api_key == "no-key-needed"
    with caplog.at_level(logging.INFO, logger="ellm"):
        client = build_client({**spec, "api_key_env": "MY_SERVER_KEY"},
                              cache_dir=tmp_path / "c")
    assert client._openai.api_key == "local-key-1"
    assert any("gets the API key in $MY_SERVER_KEY" in r.getMessage() for r in caplog.records)
    for bad in ("OPENAI_API_KEY", "1BAD", "A-B", ""):
        with pytest.raises(ValueError, match="api_key_env"):
            lm_config.parse_lm_spec({"api_key_env": bad})


@pytest.mark.e2e
@pytest.mark.slow
def test_a_sweep_writes_no_key_given_in_a_dict_override_or_a_config_file(tmp_path):
    # A copy of the front door whose config.yaml holds a key, as a user's edited copy would.
    shutil.copy(ROOT / "train.py", tmp_path / "train.py")
    config = (ROOT / "config.yaml").read_text()
    assert "\nopenai_key: null" in config
    (tmp_path / "config.yaml").write_text(
        config.replace("\nopenai_key: null", f"\nopenai_key: {SECRET}-file"))
    overrides = [*PRETRAIN[:-1], *TINY, "num_train_frames=80", "num_seed_frames=40",
                 "eval_every_frames=80", "use_wandb=True", "use_tb=True", "exp_name=KEYS",
                 f"env_spec.lm_spec={{lm_class: SimpleOracle, openai_key: {SECRET}-dict}}"]
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "train.py"), "-m", "seed=1,2", *overrides],
        cwd=tmp_path, env=train_env(tmp_path, {"PYTHONPATH": str(ROOT)}), capture_output=True,
        text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name not in
             ("config.yaml", "train.py")]
    assert any(p.name == "multirun.yaml" for p in files)
    assert any(p.suffix == ".wandb" or "wandb-metadata" in p.name for p in files)
    assert sum(p.name == "config.json" for p in files) == 2
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), f"a key leaked into {path}"
    assert SECRET not in proc.stdout + proc.stderr
