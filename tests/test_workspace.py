"""The training loop in process: a checkpoint round trip restores the agent, the counters and
the random streams exactly, the run records what it is, and the actors' chunks make the same
run as this process's rollout."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, csv_rows
from hydra import compose, initialize_config_dir

import ellm
from ellm.actors import ActorCollector, ActorLMCounters
from ellm.actors.messages import ChunkWriter
from ellm.loop.collect import EpisodeEnd
from ellm.loop.timing import Timer
from ellm.loop.workspace import Workspace
from ellm.run import checkpoint
from ellm.run.config import validate

ROOT = Path(__file__).resolve().parents[1]
LOOP = [t for t in TINY if not t.startswith(("num_train_frames", "eval_every_frames"))]


def workspace(run_dir: Path, *overrides: str) -> Workspace:
    with initialize_config_dir(str(ROOT), version_base="1.3"):
        cfg = compose("config", overrides=["device=cpu", "agent=rnd", *LOOP, *overrides])
    return Workspace(validate(cfg), run_dir)


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
    assert resumed.counters == ws.counters and ws.counters.frame == 100
    saved, restored = ws.agent.state_dict(), resumed.agent.state_dict()
    flat_saved, flat_restored = _tensors(saved), _tensors(restored)
    assert flat_saved.keys() == flat_restored.keys()
    for key, value in flat_saved.items():
        assert torch.equal(value, flat_restored[key]), key
    # The random streams continue where the snapshot left them.
    assert torch.equal(torch.get_rng_state(), meta["rng"]["torch"])
    assert resumed.env.episode_count == meta["env_episodes"]["train"]


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "older_snapshot"])
def test_resume_drops_the_replay_episodes_written_after_the_snapshot(tmp_path, caplog, recorded):
    run, keep = tmp_path / "run", ["eval_every_frames=100", "save_buffer=true"]
    workspace(run, "num_train_frames=100", *keep).train()
    snapshot = (run / "snapshot.pt").read_bytes()
    _, meta = checkpoint.load(run)
    kept = sorted(p.name for p in (run / "buffer").glob("*.npz"))
    assert meta["replay_episodes"] == len(kept) >= 2  # 40-step episodes
    # The run goes on past its snapshot and is killed before the next one: the snapshot on disk
    # is the old one, the replay holds the episodes of the frames after it.
    workspace(run, "num_train_frames=200", *keep, f"snapshot_path={run}").train()
    written = sorted(p.name for p in (run / "buffer").glob("*.npz"))
    assert len(written) > len(kept)
    (run / "snapshot.pt").write_bytes(snapshot)
    if not recorded:  # a snapshot from before ellm recorded the count: it cannot tell
        data = torch.load(run / "snapshot.pt", weights_only=True)
        del data["meta"]["replay_episodes"]
        torch.save(data, run / "snapshot.pt")

    resumed = workspace(run, "num_train_frames=200", *keep, f"snapshot_path={run}")
    if not recorded:
        assert sorted(p.name for p in (run / "buffer").glob("*.npz")) == written
        assert "episodes written after it stay" in caplog.text
        return
    assert sorted(p.name for p in (run / "buffer").glob("*.npz")) == kept
    assert resumed.storage.episodes_written == len(kept)
    assert resumed.storage.num_transitions == 80 <= resumed.counters.frame == 100
    resumed.train()
    _, meta = checkpoint.load(run)
    # Its episodes end at frames 40 and 80, then (a new one started at 100) 140 and 180.
    assert meta["frame"] == 200 and meta["replay_episodes"] == 4


def test_a_run_resumed_at_frame_0_is_evaluated_there_once_and_drops_later_rows(tmp_path):
    run, keep = tmp_path / "run", ["num_train_frames=100", "eval_every_frames=100"]
    first = workspace(run, *keep)
    first._evaluate()  # the untrained agent's evaluation and the snapshot at frame 0 ...
    first.logger.close()  # ... then the run is killed
    snapshot = (run / "snapshot.pt").read_bytes()
    workspace(run, *keep, f"snapshot_path={run}").train()
    assert [int(float(r["frame"])) for r in csv_rows(run / "eval.csv")] == [0, 100]
    assert csv_rows(run / "train.csv")
    # Killed again before its next snapshot: the rows after frame 0 go, the evaluation stays.
    (run / "snapshot.pt").write_bytes(snapshot)
    workspace(run, *keep, f"snapshot_path={run}")
    assert [int(float(r["frame"])) for r in csv_rows(run / "eval.csv")] == [0]
    assert csv_rows(run / "train.csv") == []


def _tensors(state, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    items = state.items() if isinstance(state, dict) else enumerate(state)
    for key, value in items:
        if isinstance(value, torch.Tensor):
            out[f"{prefix}{key}"] = value
        elif isinstance(value, (dict, list, tuple)):
            out.update(_tensors(value, f"{prefix}{key}."))
    return out


class ActorsHere:
    """The pool's side an :class:`ActorCollector` talks to, served by the workspace's own
    rollout and agent: the chunks an actor would send (of up to ``steps`` steps, closed at an
    episode's end), made in this process from the same seed as the one-process run."""

    def __init__(self, ws: Workspace, steps: int):
        self.ws, self.steps = ws, steps
        self.writer = ChunkWriter(0, ws.inputs)
        self.in_episode, self.taken = False, 0

    def receive(self):
        rollout = self.ws.rollout
        if not self.in_episode:
            self.writer.start(rollout.reset(), rollout)
            self.in_episode = True
        while True:
            step = rollout.step(lambda inputs: self.ws.agent.act(inputs, self.ws.counters.frame,
                                                                False))
            self.writer.add(step)
            if step.last or len(self.writer) == self.steps:
                self.in_episode = not step.last
                end = EpisodeEnd.of(rollout, step.info, Timer()) if step.last else None
                return self.writer.take(end, None)

    def took(self, actor: int, frames: int, run_frame: int, decay_from: int | None) -> None:
        self.taken += frames

    def publish(self, state) -> None:
        pass


@pytest.mark.slow
def test_the_actors_chunks_make_the_same_run_as_this_process(tmp_path, monkeypatch):
    """The one loop over either collector: the same seed gives the same replay rows, the same
    updates at the same frames and the same training rows, whether the steps come from this
    process's rollout or as actors' chunks (here made in process, with epsilon held at 1 so
    that acting ahead of the learner chooses the same actions)."""
    same = ("num_train_frames=400", "eval_every_frames=400", "env_spec.length=50",
            "agent.train_eps_min=1")
    local = workspace(tmp_path / "local", *same)
    local.train()
    actors = workspace(tmp_path / "actors", *same)
    here = ActorsHere(actors, steps=16)

    @contextlib.contextmanager
    def collector():
        yield ActorCollector(here, actors.agent, ActorLMCounters(actors.eval_goals), [0], 100,
                             lambda: (actors.counters.frame, actors.counters.first_reward_frame))

    monkeypatch.setattr(actors, "collector", collector)
    actors.train()
    assert local.agent.num_updates == actors.agent.num_updates > 50
    files = [sorted((ws.run_dir / "buffer").glob("*.npz")) for ws in (local, actors)]
    assert [f.name for f in files[0]] == [f.name for f in files[1]] and len(files[0]) >= 7
    for a, b in zip(*files):
        with np.load(a) as x, np.load(b) as y:
            assert all(np.array_equal(x[k], y[k]) for k in x.files), a.name
    rows = [csv_rows(ws.run_dir / "train.csv") for ws in (local, actors)]
    untimed = [[{k: v for k, v in r.items() if k != "fps" and not k.startswith("time")}
                for r in run] for run in rows]
    assert untimed[0] == untimed[1] and len(untimed[0]) >= 7
    assert float(rows[1][-1]["updates"]) == actors.agent.num_updates
    assert here.taken >= 400 - 16  # the pool heard of every chunk the loop finished


def test_the_config_is_parsed_once_and_its_parts_taken_as_parsed(tmp_path):
    ws = workspace(tmp_path / "run", "num_train_frames=100", "eval_every_frames=100")
    assert ws.agent.options is ws.spec.agent  # the agent did not parse agent.* again
    assert (ws.game, ws.method, ws.device) == (ws.spec.game, ws.spec.method, ws.spec.device)
    with pytest.raises(TypeError, match="agent_options"):  # one source of options, not two
        type(ws.agent)((4, 84, 84), 5, agent_options=ws.spec.agent, lr=1e-3)


def test_run_counters_mark_the_frame_the_rewards_reach_one_and_round_trip_a_snapshot():
    counters = checkpoint.RunCounters()
    assert [counters.count(r) for r in (0.5, 0.0, 0.5, 1.0)] == [False, False, True, False]
    assert (counters.frame, counters.first_reward_frame, counters.cumulative_reward) == (4, 3, 2.0)
    counters.actor_env_episodes += [3, 1]
    assert checkpoint.RunCounters.from_meta(counters.meta()) == counters
    # a snapshot of an older version, before the optional counters were recorded
    assert checkpoint.RunCounters.from_meta({"frame": 7, "episode": 2}) == checkpoint.RunCounters(
        frame=7, episode=2)


def test_each_games_evaluation_log_line():
    from ellm.games import CrafterGame, HousekeepGame, eval_summary

    crafter = {"eval/episode_reward": 2.345, "eval/score": 1.5, "eval/episode_length": 399.6}
    assert eval_summary(CrafterGame(), crafter, 5000) == (
        "[eval @ 5000 frames] achievements/episode 2.35, crafter score 1.50%, episode length 400")
    housekeep = {"housekeep/rearrange_success": 0.25, "housekeep/pick_success": 0.5,
                 "housekeep/place_success": 0.125}
    assert eval_summary(HousekeepGame(), housekeep, 60) == (
        "[eval @ 60 frames] rearrange success 0.25, objects picked 0.50, placed right 0.12, "
        "episode length nan")
