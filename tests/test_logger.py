"""The logger's CSV files and the stats writer: namespaces, growing headers, and the rows a
killed run wrote after its snapshot dropped on resume."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import pytest

from ellm.run.logger import Logger
from text_game.stats import StatsWriter, load_stats


def read(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_namespaces_pick_the_csv_file_and_headers_grow(tmp_path):
    logger = Logger(tmp_path)
    logger.log({"train/a": 1, "eval/b": 2}, frame=10)
    logger.log({"train/a": 3, "train/c": 4}, frame=20)
    logger.close()
    assert read(tmp_path / "train.csv") == [
        {"frame": "10", "a": "1.0", "c": ""}, {"frame": "20", "a": "3.0", "c": "4.0"}]
    assert read(tmp_path / "eval.csv") == [{"frame": "10", "b": "2.0"}]
    with pytest.raises(ValueError, match="namespace"):
        Logger(tmp_path).log({"loss": 1.0}, frame=0)


def test_resumed_logger_drops_rows_after_the_snapshot(tmp_path):
    logger = Logger(tmp_path)
    for frame in (100, 200, 300):
        logger.log({"train/a": frame}, frame=frame)
    with (tmp_path / "train.csv").open("a") as f:
        f.write("40")  # a row torn by kill -9
    resumed = Logger(tmp_path, resumed_at=200)
    resumed.log({"train/a": 250}, frame=250)
    assert [r["frame"] for r in read(tmp_path / "train.csv")] == ["100", "200", "250"]


@pytest.mark.parametrize("snapshot_frame", [0, 200])
def test_resumed_logger_drops_rows_and_events_after_the_snapshot_kept_at_it(tmp_path,
                                                                            snapshot_frame):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = Logger(tmp_path, use_tb=True)
    for frame in (0, 200, 300):
        logger.log({"eval/a": frame}, frame=frame)
    logger.close()
    resumed = Logger(tmp_path, use_tb=True, resumed_at=snapshot_frame)
    resumed.log({"eval/a": 250}, frame=250)
    resumed.close()
    kept = [f for f in (0, 200) if f <= snapshot_frame] + [250]
    assert [int(r["frame"]) for r in read(tmp_path / "eval.csv")] == kept
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/a")] == kept


def test_stats_writer_keeps_episodes_up_to_the_snapshot(tmp_path):
    path = tmp_path / "stats.jsonl"
    writer = StatsWriter(path)
    for frame in (40, 80, 120):
        writer.write({"length": 40, "reward": 1.0, "frame": frame})
    with path.open("a") as f:
        f.write('{"length": 4')  # torn line
    StatsWriter(path, keep_until=80).write({"length": 40, "reward": 2.0, "frame": 120})
    assert [ep["frame"] for ep in load_stats(path)] == [40, 80, 120]
    assert json.loads(path.read_text().splitlines()[-1])["reward"] == 2.0


def test_an_offline_wandb_run_ends_saying_how_to_upload_it(tmp_path, monkeypatch, caplog):
    pytest.importorskip("wandb")
    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": tmp_path,
                       "WANDB_CACHE_DIR": tmp_path / "cache",
                       "WANDB_CONFIG_DIR": tmp_path / "config"}.items():
        monkeypatch.setenv(key, str(value))
    logger = Logger(tmp_path, use_wandb=True, wandb_name="offline-test")
    logger.log({"train/a": 1.0}, frame=10)
    with caplog.at_level(logging.INFO, logger="ellm"):
        logger.close()
    (hint,) = [r.getMessage() for r in caplog.records if "wandb sync" in r.getMessage()]
    run_dir = Path(hint.rpartition("wandb sync ")[2])
    assert run_dir.parent == tmp_path / "wandb" and run_dir.name.startswith("offline-run-")
    assert list(run_dir.glob("run-*.wandb"))  # the directory wandb sync uploads
