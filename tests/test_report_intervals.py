"""The 95% t-intervals over seeds, exactly, and the table they make of runs' last evaluations."""

from __future__ import annotations

import json
import math

import pytest

from ellm_tools.report.intervals import interval, main


def test_the_interval_is_student_t_over_the_seeds():
    mean, low, high = interval([1.0, 2.0, 4.0, 3.5, 2.2])
    # t(0.975, 4) = 2.776; sample std 1.2137...; sqrt(5)
    half = 2.776 * math.sqrt(sum((v - 2.54) ** 2 for v in [1.0, 2.0, 4.0, 3.5, 2.2]) / 4) \
        / math.sqrt(5)
    assert (mean, low, high) == pytest.approx((2.54, 2.54 - half, 2.54 + half))
    assert math.isnan(interval([3.0])[1])


def test_the_table_lists_each_seed_beside_the_interval(tmp_path, capsys):
    for seed, value in ((1, 2.0), (2, 4.0)):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"method": "rnd", "seed": seed}))
        (run / "eval.csv").write_text(f"frame,episode_reward,score\n0,0.0,0.0\n10,{value},1.5\n")
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    half = 12.706 * math.sqrt(2.0) / math.sqrt(2)
    assert f"| RND | achievements / episode | 3.00 [{3 - half:.2f}, {3 + half:.2f}] | 2: 2.00, 4.00 |" in out
    assert main([str(tmp_path / "none")]) == 2


def test_at_a_frame_and_per_achievement_rates(tmp_path, capsys):
    for seed, (early, late) in ((1, (1.0, 2.0)), (2, (3.0, 4.0))):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"method": "rnd", "seed": seed}))
        (run / "eval.csv").write_text(
            f"frame,episode_reward,game_return\n0,0.0,0.0\n10,{early},0.5\n20,{late},0.7\n")
        (run / "achievements.csv").write_text(
            f"frame,collect_wood,wake_up\n10,{early * 10},100.0\n20,{late * 10},100.0\n")
    assert main([str(tmp_path), "--at", "15", "--achievements"]) == 0
    out = capsys.readouterr().out
    assert "| RND | achievements / episode @ 10 | 2.00 [" in out and "2: 1.00, 3.00 |" in out
    assert "| RND | game return @ 10 | 0.50 [0.50, 0.50] | 2: 0.50, 0.50 |" in out
    assert "| RND | success % collect_wood @ 10 | 20.00 [" in out and "2: 10.00, 30.00 |" in out
    assert main([str(tmp_path)]) == 0
    assert "| RND | achievements / episode | 3.00 [" in capsys.readouterr().out
