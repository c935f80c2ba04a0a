"""The training loop in process: a checkpoint round trip restores the agent, the counters and
the random streams exactly, and the run records what it is."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import TINY
from hydra import compose, initialize_config_dir

import ellm
from ellm import checkpoint
from ellm.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
LOOP = [t for t in TINY if not t.startswith(("num_train_frames", "eval_every_frames"))]


def workspace(run_dir: Path, *overrides: str) -> Workspace:
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        cfg = compose("config", overrides=["device=cpu", "agent=rnd", *LOOP, *overrides])
    return Workspace(cfg, run_dir)


def test_checkpoint_round_trip_restores_agent_counters_and_random_streams(tmp_path):
    ws = workspace(tmp_path / "run", "num_train_frames=100", "eval_every_frames=100")
    ws.train()
    _, meta = checkpoint.load(tmp_path / "run")
    assert meta["frame"] == 100 and meta["method"] == "rnd" and meta["game"] == "crafter"
    assert meta["versions"]["ellm"] == ellm.__version__
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (record["method"], record["game"]) == ("rnd", "crafter")

    resumed = workspace(tmp_path / "run", "num_train_frames=100", "eval_every_frames=100",
                        f"snapshot_path={tmp_path / 'run'}")
    assert (resumed.frame, resumed.episode) == (ws.frame, ws.episode)
    saved, restored = ws.agent.state_dict(), resumed.agent.state_dict()
    flat_saved, flat_restored = _tensors(saved), _tensors(restored)
    assert flat_saved.keys() == flat_restored.keys()
    for key, value in flat_saved.items():
        assert torch.equal(value, flat_restored[key]), key
    # The random streams continue where the snapshot left them.
    assert torch.equal(torch.get_rng_state(), meta["rng"]["torch"])
    assert resumed.env.episode_count == meta["env_episodes"]["train"]


def _tensors(state, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    items = state.items() if isinstance(state, dict) else enumerate(state)
    for key, value in items:
        if isinstance(value, torch.Tensor):
            out[f"{prefix}{key}"] = value
        elif isinstance(value, (dict, list, tuple)):
            out.update(_tensors(value, f"{prefix}{key}."))
    return out
