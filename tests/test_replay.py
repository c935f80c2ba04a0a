"""Replay: exact n-step maths, frame stacks, text ids, files, and the sampling loaders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ellm.replay import (
    Batch,
    EpisodeShard,
    EpisodeStart,
    ReplayStorage,
    Row,
    StringTable,
    drop_episodes_from,
    list_episode_files,
    load_episode,
    make_replay_loader,
    nstep_targets,
)
from ellm.replay import storage as storage_module

GAMMA = 0.99
REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- helpers


def frame(ep: int, t: int) -> np.ndarray:
    """A frame whose pixels say which (episode, step) it is."""
    f = np.full((84, 84), (ep * 31 + t * 7) % 256, np.uint8)
    f[0, 0], f[0, 1] = ep, t
    return f


def row(f: np.ndarray, last: bool, action: int = 0, text: str = "") -> Row:
    return Row(f, action, 0.0, 1.0, text, "", last)


def reward_of(ep: int, t: int) -> float:
    return ((ep * 7 + t) % 5 - 2) * 0.75  # -1.5 .. 1.5: clipping matters


class Episodes:
    """Writes episodes through ReplayStorage and remembers the ground truth."""

    def __init__(self, replay_dir: Path) -> None:
        self.strings = StringTable(replay_dir / "strings.jsonl")
        self.storage = ReplayStorage(replay_dir, self.strings)
        self.truth: dict[int, tuple[list[float], list[float]]] = {}  # ep -> (r[0..T], d[0..T])

    def write(self, length: int, terminal: bool, rewards: list[float] | None = None) -> int:
        ep = self.storage.num_episodes
        rewards = rewards or [reward_of(ep, t) for t in range(1, length + 1)]
        discounts = [0.0 if terminal and t == length else 1.0 for t in range(1, length + 1)]
        self.storage.add_first(EpisodeStart(frame(ep, 0), f"text {ep} 0", f"goal {ep} 0"))
        for t in range(1, length + 1):
            self.storage.add(Row(
                frame(ep, t), 100 * ep + t, rewards[t - 1], discounts[t - 1],
                f"text {ep} {t}", f"goal {ep} {t}", t == length,
            ))
        self.truth[ep] = ([0.0, *rewards], [1.0, *discounts])
        return ep

    def check(self, batch: Batch, nstep: int, stack: int, clip: bool = True) -> list[int]:
        """Assert every sample matches the ground truth; returns the sampled episodes."""
        b = Batch(*(None if x is None else np.asarray(x) for x in batch))
        seen = []
        for n in range(len(b.action)):
            ep, t0 = int(b.obs[n, -1, 0, 0]), int(b.obs[n, -1, 0, 1])
            rewards, discounts = self.truth[ep]
            length, i = len(rewards) - 1, t0 + 1
            k = min(nstep, length - i + 1)
            assert b.n_steps[n] == k
            for s in range(stack):
                back = stack - 1 - s
                assert np.array_equal(b.obs[n, s], frame(ep, max(t0 - back, 0)))
                assert np.array_equal(b.next_obs[n, s], frame(ep, max(t0 + k - back, 0)))
                if b.one_step_next_obs is not None:
                    assert np.array_equal(b.one_step_next_obs[n, s], frame(ep, max(i - back, 0)))
            assert b.action[n] == 100 * ep + i
            ret, alive = 0.0, 1.0
            for j in range(k):
                r = rewards[i + j]
                ret += GAMMA**j * alive * (min(max(r, -1.0), 1.0) if clip else r)
                alive *= discounts[i + j]
            assert b.reward[n] == pytest.approx(ret, abs=1e-6)
            assert b.discount[n] == pytest.approx(GAMMA**k * alive, abs=1e-6)
            assert self.strings[int(b.text_obs[n])] == f"text {ep} {t0}"
            assert self.strings[int(b.next_text_obs[n])] == f"text {ep} {t0 + k}"
            assert self.strings[int(b.goal[n])] == f"goal {ep} {t0}"
            assert self.strings[int(b.next_goal[n])] == f"goal {ep} {t0 + k}"
            seen.append(ep)
        return seen


def sample_shard(replay_dir: Path, batch_size: int, nstep: int = 3, stack: int = 4, clip=True):
    shard = EpisodeShard(capacity=10**6, nstep=nstep, clip_reward=clip)
    for f in list_episode_files(replay_dir):
        shard.add(f.index, load_episode(f.path))
    return shard.sample(np.random.default_rng(0), batch_size, stack, GAMMA, True)


def loader(replay_dir: Path, num_workers: int = 0, **kw):
    args = {"capacity": 10**6, "batch_size": 32, "num_workers": num_workers, "nstep": 3,
            "discount": GAMMA, "frame_stack": 4, "clip_reward": True, "save_buffer": True,
            "seed": 0}
    return make_replay_loader(replay_dir, **{**args, **kw})


# ---------------------------------------------------------------------------- n-step maths

HAND_REWARDS = [0.5, 2.0, -3.0, 1.0, 0.25]  # r_1..r_5; clipped: 0.5, 1, -1, 1, 0.25
# i -> (k, clipped n-step reward, discount after termination at 5, discount after truncation)
HAND_EXPECTED = {
    1: (3, 0.5 + 0.99 - 0.9801, 0.970299, 0.970299),
    2: (3, 1.0 - 0.99 + 0.9801, 0.970299, 0.970299),
    3: (3, -1.0 + 0.99 + 0.9801 * 0.25, 0.0, 0.970299),
    4: (2, 1.0 + 0.99 * 0.25, 0.0, 0.9801),
    5: (1, 0.25, 0.0, 0.99),
}


@pytest.mark.parametrize("terminal", [True, False])
def test_nstep_returns_on_hand_made_episode(tmp_path, terminal):
    Episodes(tmp_path).write(5, terminal, HAND_REWARDS)
    batch = sample_shard(tmp_path, batch_size=300)
    seen = set()
    for n in range(300):
        i = int(batch.obs[n, -1, 0, 1]) + 1
        k, reward, d_term, d_trunc = HAND_EXPECTED[i]
        assert batch.n_steps[n] == k
        assert batch.reward[n] == pytest.approx(reward, abs=1e-6)
        assert batch.discount[n] == pytest.approx(d_term if terminal else d_trunc, abs=1e-6)
        assert batch.next_obs[n, -1, 0, 1] == i - 1 + k
        seen.add(i)
    assert seen == set(HAND_EXPECTED)


def test_nstep_without_clipping(tmp_path):
    Episodes(tmp_path).write(5, True, HAND_REWARDS)
    batch = sample_shard(tmp_path, batch_size=100, clip=False)
    first = batch.obs[:, -1, 0, 1] == 0
    assert first.any()
    assert batch.reward[first] == pytest.approx(0.5 + 0.99 * 2.0 - 0.9801 * 3.0, abs=1e-6)


def test_nstep_targets_stop_at_a_termination_inside_the_window():
    rewards = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.5, -0.5, 9.0]])
    discounts = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    reward, discount = nstep_targets(rewards, discounts, np.array([3, 3, 2]), GAMMA)
    np.testing.assert_allclose(reward, [1.99, 1.0, 0.5 - 0.495], atol=1e-6)
    np.testing.assert_allclose(discount, [0.0, 0.0, 0.9801], atol=1e-6)  # k=2 ignores d[2]


# ---------------------------------------------------------------------------- stacks and ids


def test_frame_stacks_next_obs_and_text_ids(tmp_path):
    eps = Episodes(tmp_path)
    eps.write(6, terminal=False)
    eps.write(3, terminal=True)
    batch = sample_shard(tmp_path, batch_size=200)
    # spelled out for the first step of episode 0: padding with its reset frame
    n = int(np.flatnonzero((batch.obs[:, -1, 0, 0] == 0) & (batch.obs[:, -1, 0, 1] == 0))[0])
    assert [int(f[0, 1]) for f in batch.obs[n]] == [0, 0, 0, 0]
    assert [int(f[0, 1]) for f in batch.next_obs[n]] == [0, 1, 2, 3]
    assert [int(f[0, 1]) for f in batch.one_step_next_obs[n]] == [0, 0, 0, 1]
    assert eps.strings[int(batch.goal[n])] == "goal 0 0"
    assert eps.strings[int(batch.next_goal[n])] == "goal 0 3"
    assert sorted(set(eps.check(batch, nstep=3, stack=4))) == [0, 1]


def test_frame_stack_one_and_nstep_one(tmp_path):
    eps = Episodes(tmp_path)
    eps.write(4, terminal=True)
    batch = sample_shard(tmp_path, batch_size=50, nstep=1, stack=1)
    assert batch.obs.shape == (50, 1, 84, 84)
    eps.check(batch, nstep=1, stack=1)


# ---------------------------------------------------------------------------- string table


def test_string_table_ids_persist_and_resume(tmp_path):
    path = tmp_path / "strings.jsonl"
    table = StringTable(path)
    assert len(table) == 1 and table[0] == "" and table.id("") == 0
    texts = ["You see a tree.", "two\nlines", 'quote " and \\', "ünïcode ☃", "\u2028sep"]
    ids = [table.id(s) for s in texts]
    assert ids == [1, 2, 3, 4, 5] and table.id("You see a tree.") == 1
    table.close()
    again = StringTable(path)
    assert len(again) == 6 and [again[i] for i in ids] == texts
    assert again.id("new") == 6
    with pytest.raises(IndexError):
        again[-1]
    with pytest.raises(TypeError):
        again.id(3)


def test_string_table_writes_each_new_string_at_once(tmp_path):
    table = StringTable(tmp_path / "strings.jsonl")
    table.id("a")
    table.id("b")
    reader = StringTable(tmp_path / "strings.jsonl")  # e.g. after a kill -9 here
    assert len(reader) == 3 and reader[2] == "b"


def test_storage_syncs_the_strings_before_each_episode_file(tmp_path, monkeypatch):
    eps = Episodes(tmp_path)
    visible_at_sync = []
    sync = eps.strings.sync
    monkeypatch.setattr(eps.strings, "sync", lambda: (
        visible_at_sync.append(len(list_episode_files(tmp_path))), sync()))
    eps.write(3, terminal=False)
    eps.write(2, terminal=True)
    assert visible_at_sync == [0, 1]


def test_string_table_ignores_a_truncated_last_line(tmp_path):
    path = tmp_path / "strings.jsonl"
    path.write_bytes(b'"a"\n"b"\n"c\xe2')  # killed in the middle of writing "c..."
    table = StringTable(path)
    assert len(table) == 3 and table[2] == "b"
    assert table.id("d") == 3  # the partial line was cut, so "d" gets its own line
    table.close()
    assert [StringTable(path)[i] for i in range(4)] == ["", "a", "b", "d"]


def test_string_table_rejects_a_corrupt_complete_line(tmp_path):
    path = tmp_path / "strings.jsonl"
    path.write_bytes(b'"a"\n{oops\n"c"\n')
    with pytest.raises(ValueError, match="strings.jsonl:2"):
        StringTable(path)


# ---------------------------------------------------------------------------- storage


def test_an_episode_file_with_the_former_game_reward_column_still_loads(tmp_path):
    """Replays written before the game reward was dropped from the row resume as they are."""
    eps = Episodes(tmp_path)
    eps.write(3, terminal=True)
    path = tmp_path / "000000_3.npz"
    old = {**load_episode(path), "game_reward": np.ones(4, np.float32)}
    storage_module.save_episode(path, old)
    loaded = load_episode(path)
    assert "game_reward" not in loaded and loaded["reward"].tolist() == old["reward"].tolist()
    shard = EpisodeShard(10**6, 3, True)
    shard.add(0, loaded)
    assert shard.num_transitions == 3


def test_storage_file_layout_and_resumed_numbering(tmp_path):
    eps = Episodes(tmp_path)
    eps.write(3, terminal=True)
    eps.write(2, terminal=False)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["000000_3.npz", "000001_2.npz", "strings.jsonl"]
    ep = load_episode(tmp_path / "000000_3.npz")
    assert ep["frame"].shape == (4, 84, 84) and ep["frame"].dtype == np.uint8
    assert ep["action"].tolist() == [0, 1, 2, 3]
    assert ep["discount"].tolist() == [1.0, 1.0, 1.0, 0.0]
    assert ep["reward"].tolist() == [0.0] + [reward_of(0, t) for t in (1, 2, 3)]
    assert ep["text_obs"].dtype == np.int32
    assert [eps.strings[i] for i in ep["goal"]] == [f"goal 0 {t}" for t in range(4)]
    (tmp_path / "000000_3.npz").unlink()  # e.g. dropped with save_buffer=False
    resumed = ReplayStorage(tmp_path, StringTable(tmp_path / "strings.jsonl"))
    assert (resumed.num_episodes, resumed.num_transitions) == (1, 2)
    resumed.add_first(EpisodeStart(frame(9, 0), "", ""))
    resumed.add(row(frame(9, 1), last=True))
    assert (tmp_path / "000002_1.npz").exists()


def test_storage_rejects_misuse(tmp_path):
    storage = ReplayStorage(tmp_path, StringTable(tmp_path / "s.jsonl"))
    with pytest.raises(RuntimeError):
        storage.add(row(frame(0, 1), last=False))
    with pytest.raises(ValueError):
        storage.add_first(EpisodeStart(frame(0, 0).astype(np.float32), "", ""))
    storage.add_first(EpisodeStart(frame(0, 0), "", ""))
    with pytest.raises(RuntimeError):
        storage.add_first(EpisodeStart(frame(0, 0), "", ""))
    with pytest.raises(ValueError):
        storage.add(row(np.zeros((84, 83), np.uint8), last=True))
    with pytest.raises(ValueError):
        storage.add(Row(frame(0, 1), 0, 0.0, 1.5, "", "", True))


def test_storage_keeps_one_open_episode_per_source(tmp_path):
    """Actors' steps arrive interleaved: each source's episode is written whole when it ends,
    and one still open when the run stops is never written."""
    storage = ReplayStorage(tmp_path, StringTable(tmp_path / "s.jsonl"))
    storage.add_first(EpisodeStart(frame(0, 0), "a0", ""), source=0)
    storage.add_first(EpisodeStart(frame(1, 0), "b0", ""), source=1)
    storage.add_first(EpisodeStart(frame(2, 0), "c0", ""), source=2)
    storage.add(row(frame(1, 1), last=False, action=1, text="b1"), source=1)
    storage.add(row(frame(0, 1), last=False, action=1, text="a1"), source=0)
    storage.add(row(frame(1, 2), last=False, action=2, text="b2"), source=1)
    storage.add(row(frame(0, 2), last=True, action=2, text="a2"), source=0)
    storage.add(row(frame(2, 1), last=False), source=2)
    storage.add(row(frame(1, 3), last=True, action=3, text="b3"), source=1)
    with pytest.raises(RuntimeError):
        storage.add(row(frame(0, 4), last=True), source=0)  # source 0's episode has ended
    files = list_episode_files(tmp_path)
    assert [(f.index, f.length) for f in files] == [(0, 2), (1, 3)]  # in the order they ended
    a, b = (load_episode(f.path) for f in files)
    assert a["frame"][:, 0, 0].tolist() == [0, 0, 0] and a["action"].tolist() == [0, 1, 2]
    assert b["frame"][:, 0, 0].tolist() == [1, 1, 1, 1] and b["action"].tolist() == [0, 1, 2, 3]
    assert [storage.strings[i] for i in b["text_obs"]] == ["b0", "b1", "b2", "b3"]
    assert (storage.num_episodes, storage.num_transitions) == (2, 5)  # source 2 never ended


def test_interrupted_write_leaves_no_visible_episode(tmp_path, monkeypatch):
    eps = Episodes(tmp_path)
    eps.write(4, terminal=False)

    def crash(f, **arrays):
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(storage_module.np, "savez_compressed", crash)
    with pytest.raises(KeyboardInterrupt):
        eps.write(5, terminal=False)
    monkeypatch.undo()
    assert not list(tmp_path.glob(".*.tmp"))  # an error mid-write removes its temp file
    assert [f.index for f in list_episode_files(tmp_path)] == [0]
    # a kill -9 mid-write leaves the torn temp file behind
    (tmp_path / ".000001_5.npz.tmp").write_bytes(b"PK\x03\x04 half a zip")
    eps.check(next(loader(tmp_path)), nstep=3, stack=4)  # readers ignore the temp file
    again = Episodes(tmp_path)  # and a restarted storage removes it, then numbers from 1
    assert not list(tmp_path.glob(".*.tmp"))
    again.write(2, terminal=True)
    assert [f.name for f in tmp_path.glob("*.npz")] and (tmp_path / "000001_2.npz").exists()


_WRITER = """
import sys
from pathlib import Path
import numpy as np
from ellm.replay.storage import EpisodeStart, ReplayStorage, Row
from ellm.replay.strings import StringTable
d = Path(sys.argv[1])
storage = ReplayStorage(d, StringTable(d / "strings.jsonl"))
rng = np.random.default_rng(storage.num_episodes)
while True:
    ep = storage.num_episodes
    storage.add_first(EpisodeStart(rng.integers(0, 255, (84, 84), np.uint8), f"{ep} 0", "goal"))
    for t in range(1, 21):
        storage.add(Row(rng.integers(0, 255, (84, 84), np.uint8), t, 1.0, 1.0, f"{ep} {t}",
                        "goal", t == 20))
    print(ep, flush=True)
"""


def test_kill_9_while_writing_never_breaks_resume(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for run, delay in enumerate([0.05, 0.13]):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], env=env,
                                stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()  # one episode written: now kill it at some moment
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        strings = StringTable(tmp_path / "strings.jsonl")
        files = list_episode_files(tmp_path)
        assert [f.index for f in files] == list(range(len(files))) and len(files) > run + 1
        for f in files:
            ep = load_episode(f.path)
            assert [strings[i] for i in ep["text_obs"]] == [f"{f.index} {t}" for t in range(21)]
        strings.close()
    batch = next(loader(tmp_path))
    assert batch.reward.shape == (32,)


# ---------------------------------------------------------------------------- loaders


def test_in_process_loader_batches_are_correct_and_seeded(tmp_path):
    eps = Episodes(tmp_path)
    for ep in range(6):
        eps.write(3 + 4 * ep, terminal=ep % 3 == 0)
    batch = next(loader(tmp_path, one_step_next_obs=True))
    assert batch.obs.dtype == torch.uint8 and batch.obs.shape == (32, 4, 84, 84)
    assert batch.action.dtype == batch.text_obs.dtype == batch.n_steps.dtype == torch.int64
    assert batch.reward.dtype == batch.discount.dtype == torch.float32
    seen = set()
    for b, again, other in zip(loader(tmp_path), loader(tmp_path), loader(tmp_path, seed=1)):
        seen.update(eps.check(b, nstep=3, stack=4))
        assert all(torch.equal(x, y) for x, y in zip(b[:10], again[:10]))
        assert not torch.equal(b.obs, other.obs)
        if len(seen) == 6:
            break
    assert next(loader(tmp_path)).one_step_next_obs is None


def test_in_process_loader_picks_up_new_episodes_and_evicts(tmp_path):
    eps = Episodes(tmp_path)
    for _ in range(5):
        eps.write(10, terminal=False)
    it = loader(tmp_path, capacity=25, batch_size=16, save_buffer=False)
    seen = {ep for _ in range(20) for ep in eps.check(next(it), 3, 4)}
    assert seen == {3, 4}  # the newest that fit in 25 transitions
    assert [f.index for f in list_episode_files(tmp_path)] == [3, 4]  # dropped files deleted
    eps.write(10, terminal=True)
    seen = {ep for _ in range(20) for ep in eps.check(next(it), 3, 4)}
    assert seen == {4, 5}
    assert [f.index for f in list_episode_files(tmp_path)] == [4, 5]


def test_save_buffer_keeps_dropped_episode_files(tmp_path):
    eps = Episodes(tmp_path)
    for _ in range(4):
        eps.write(10, terminal=False)
    it = loader(tmp_path, capacity=10, save_buffer=True)
    assert set(eps.check(next(it), 3, 4)) == {3}
    eps.write(10, terminal=False)
    assert set(eps.check(next(it), 3, 4)) == {4}  # 3 evicted
    assert len(list_episode_files(tmp_path)) == 5


def test_in_process_loader_on_empty_dir_raises(tmp_path):
    with pytest.raises(RuntimeError, match="no episodes"):
        next(loader(tmp_path))


def test_two_workers_sample_disjoint_shards_correctly(tmp_path):
    eps = Episodes(tmp_path)
    for ep in range(8):
        eps.write(10, terminal=ep % 3 == 0)
    # capacity 40 over 2 workers: each keeps the 2 newest episodes of its shard (ep % 2)
    it = loader(tmp_path, num_workers=2, capacity=40, batch_size=16)
    per_batch = [set(eps.check(next(it), 3, 4)) for _ in range(30)]
    assert all(len({ep % 2 for ep in s}) == 1 for s in per_batch)  # a batch = one worker's shard
    assert set().union(*per_batch) == {4, 5, 6, 7}
    new = eps.write(10, terminal=False)  # written after the workers started
    deadline = time.monotonic() + 20
    while new not in eps.check(next(it), 3, 4):
        assert time.monotonic() < deadline, "the worker never picked up the new episode"
    recent = set().union(*(eps.check(next(it), 3, 4) for _ in range(30)))
    assert recent == {5, 6, 7, 8}  # 8 evicted 6's shard-mate 4


def test_a_worker_waits_for_its_first_episode(tmp_path):
    eps = Episodes(tmp_path)
    eps.write(5, terminal=False)  # only shard 0 has data
    it = loader(tmp_path, num_workers=2, batch_size=8)
    assert set(eps.check(next(it), 3, 4)) == {0}  # shard 0 serves while shard 1 waits
    eps.write(5, terminal=True)
    deadline = time.monotonic() + 20
    while 1 not in eps.check(next(it), 3, 4):
        assert time.monotonic() < deadline


def _episode_files(replay_dir: Path, names: list[str]) -> None:
    replay_dir.mkdir()
    for name in names:
        (replay_dir / name).touch()  # the names are all that is read


def test_drop_episodes_from_deletes_the_later_files_only(tmp_path):
    _episode_files(tmp_path / "buffer", ["000000_40.npz", "000001_60.npz", "000002_30.npz",
                                         "strings.jsonl"])
    dropped = drop_episodes_from(tmp_path / "buffer", 1)
    assert [f.index for f in dropped] == [1, 2]
    assert sorted(p.name for p in (tmp_path / "buffer").iterdir()) == ["000000_40.npz",
                                                                      "strings.jsonl"]


def test_a_resumed_storage_numbers_on_from_the_snapshots_count(tmp_path):
    _episode_files(tmp_path / "buffer", ["000000_40.npz"])  # 1-4 were evicted, then dropped
    storage = ReplayStorage(tmp_path / "buffer", StringTable(tmp_path / "buffer" / "s.jsonl"),
                            first_index=5)
    assert storage.episodes_written == 5
    storage.add_first(EpisodeStart(np.zeros((4, 4), np.uint8), "t", "g"))
    storage.add(Row(np.zeros((4, 4), np.uint8), 0, 0.0, 1.0, "t", "g", True))
    assert [f.index for f in list_episode_files(tmp_path / "buffer")] == [0, 5]
