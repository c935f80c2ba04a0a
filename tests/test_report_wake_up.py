"""Achievements per evaluation episode without wake_up, exactly, from runs' eval/stats.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from ellm_tools.report.wake_up import main, without_wake_up

RECORDS = Path(__file__).resolve().parent.parent / "results"


def _run(path: Path, seed: int, episodes: list[tuple[int, list[str]]]) -> None:
    (path / "eval").mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"method": "random", "seed": seed}))
    lines = [json.dumps({"frame": frame, "length": 10, "achievement_wake_up": 0,
                         **{f"achievement_{a}": 1 for a in got}}) for frame, got in episodes]
    (path / "eval" / "stats.jsonl").write_text("\n".join(lines) + "\n")


def test_wake_up_is_left_out_of_an_episode_only_when_unlocked():
    assert without_wake_up({"achievement_wake_up": 1, "achievement_eat_cow": 2}) == 1
    assert without_wake_up({"achievement_wake_up": 0, "achievement_eat_cow": 1}) == 1
    assert without_wake_up({"length": 3}) == 0


def test_the_table_pools_the_last_evaluations_and_lists_each_seed(tmp_path, capsys):
    # seed 1, last 2 evals (frames 10, 20): 2+1+0+1 = 4 -> 1.00 with; 1+0+0+1 = 2 -> 0.50 without
    _run(tmp_path / "a", 1, [(0, ["wake_up", "eat_cow", "drink"]), (10, ["wake_up", "eat_cow"]),
                             (10, ["wake_up"]), (20, []), (20, ["collect_wood"])])
    # seed 2: 1+1 = 2 -> 1.00 with; 0+0 -> 0.00 without
    _run(tmp_path / "b", 2, [(10, ["wake_up"]), (20, ["wake_up"])])
    assert main([str(tmp_path), "--last-evals", "2"]) == 0
    out = capsys.readouterr().out
    # with: 1.00 and 1.00; without: 0.50 and 0.00 (ddof=0 std 0.25); wake_up's share 1 - 0.25
    assert ("| Random actions | 1, 2 | 1.00 ± 0.00 (2: 1.00, 1.00) | 0.25 ± 0.25 (2: 0.50, 0.00) "
            "| 75% | 4, 2 |") in out
    assert main([str(tmp_path / "a"), "--curve"]) == 0
    assert "0: 3.00 / 2.00; 10: 1.50 / 0.50; 20: 0.50 / 0.50" in capsys.readouterr().out
    assert main([str(tmp_path / "none")]) == 2


def test_a_committed_run_checked_by_hand(capsys):
    # cpu_small_v2 random actions, seed 1: the 15 episodes at 50k, 55k and 60k frames unlock
    # 3 + 3 + 5 = 11 achievements, 3 + 3 + 2 = 8 of them wake_up: 11/15 and 3/15
    assert main([str(RECORDS / "cpu_small_v2" / "runs" / "Random-actions_seed1"),
                 "--last-evals", "3"]) == 0
    assert "| 0.73 ± 0.00 (1: 0.73) | 0.20 ± 0.00 (1: 0.20) | 73% | 15 |" in capsys.readouterr().out
