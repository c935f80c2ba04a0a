"""Shared test set-up: everything runs offline; the ``train`` fixture (and ``run_train``, for
fixtures with their own directory) runs ``train.py`` as a user would."""

from __future__ import annotations

import atexit
import csv
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from openai_test_server import OpenAITestServer  # tests/ is on sys.path, as for conftest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

ROOT = Path(__file__).resolve().parents[1]
# The runs of one session share XLA's compiled programs: a tiny Craftax config run again
# (a resume, a finetune's pretraining) skips about 80 s of compiling on 2 cores.
JAX_CACHE = tempfile.mkdtemp(prefix="ellm-tests-jax-cache-")
atexit.register(shutil.rmtree, JAX_CACHE, True)

# A few hundred frames on 40-step episodes: every code path of a run, in about half a minute.
TINY = [
    "num_train_frames=240", "num_seed_frames=60", "eval_every_frames=120",
    "num_eval_episodes=1", "env_spec.length=40", "replay_buffer_num_workers=0",
    "batch_size=8", "agent.critic_target_update_every_steps=40", "progress=false",
]
# The original README's oracle pretraining command.
PRETRAIN = ["env_spec.use_sbert=True", "use_goal=True", "use_language_state=sbert",
            "env_spec.lm_spec.lm_class=SimpleOracle"]


def train_env(cwd: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a test run: offline, with its LM cache and W&B files under ``cwd``."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "WANDB_MODE": "offline", "ELLM_CACHE_DIR": str(cwd / "lm_cache"),
            "WANDB_DIR": str(cwd), "WANDB_CACHE_DIR": str(cwd / "wandb_cache"),
            "WANDB_CONFIG_DIR": str(cwd / "wandb_cfg"), "OMP_NUM_THREADS": "1",
            "JAX_COMPILATION_CACHE_DIR": JAX_CACHE, **(extra or {})}


def run_entry(entry: str, cwd: Path, *overrides: str, check: bool = True,
              timeout: float = 400, extra_env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    """``python ENTRY OVERRIDES`` in ``cwd``: ``train.py`` at the repository root, or a module
    run as ``python -m ENTRY`` (``llm_in_the_loop.llf_run``) from this checkout; with
    ``check``, a failure shows its stderr."""
    command = [str(ROOT / entry)] if entry.endswith(".py") else ["-m", entry]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, *command, *overrides], cwd=cwd,
                          env=train_env(cwd, {"PYTHONPATH": path, **(extra_env or {})}),
                          capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{entry} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def run_train(cwd: Path, *overrides: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``python train.py OVERRIDES`` in ``cwd`` (:func:`run_entry`)."""
    return run_entry("train.py", cwd, *overrides, **kwargs)


@pytest.fixture
def train(tmp_path: Path):
    """``train(*overrides, check=True, timeout=400, extra_env=None)``: ``python train.py OVERRIDES``
    in this test's ``tmp_path``, offline (``run_train``)."""
    return functools.partial(run_train, tmp_path)


def system_config(name: str, tmp_path: Path, *overrides: str) -> Any:
    """``llm_in_the_loop/NAME/conf/NAME.yaml`` without its ``hydra`` block, with the LM cache under
    ``tmp_path`` and ``OVERRIDES`` (dotlist) applied: a run's config built in process."""
    cfg = OmegaConf.load(ROOT / "llm_in_the_loop" / name / "conf" / f"{name}.yaml")
    cfg.pop("hydra")
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist([
        f"env_spec.lm_spec.cache_dir={tmp_path / 'cache'}", *overrides]))


def find_run(cwd: Path, exp_name: str) -> Path:
    """The one run dir of ``exp_name`` under ``cwd/exp_local``."""
    (found,) = sorted(cwd.glob(f"exp_local/*/{exp_name}_*"))
    return found


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.fixture(autouse=True, scope="session")
def _own_lm_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests never read or write the developer's LM cache: a config check of an LLM run opens
    the default cache (``$ELLM_CACHE_DIR``)."""
    before = os.environ.get("ELLM_CACHE_DIR")
    os.environ["ELLM_CACHE_DIR"] = str(tmp_path_factory.mktemp("lm_cache"))
    yield
    if before is None:
        os.environ.pop("ELLM_CACHE_DIR", None)
    else:
        os.environ["ELLM_CACHE_DIR"] = before


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    """A scripted OpenAI-compatible server on 127.0.0.1 for one test, stopped after it."""
    srv = OpenAITestServer().start()
    assert srv.is_listening()
    yield srv
    srv.stop()
    assert not srv.is_listening(), "the test server must be stopped"


@pytest.fixture
def no_real_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key or endpoint of the developer's environment reaches a test's LM client, and each
    test is a run of its own (an empty budget ledger)."""
    from ellm.lm import config as lm_config
    from lmclient import budget as lm_budget

    for name in ("OPENAI_API_KEY", "ELLM_LM_API_KEY", "OPENAI_ORG_ID", "OPENAI_BASE_URL",
                 lm_config.LEGACY_KEY_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(lm_budget, "_LEDGERS", {})
