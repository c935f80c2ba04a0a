"""The loop's timers and progress display: a bar on a terminal, plain lines in a log."""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path

import pytest

from ellm.loop.timing import EverySeconds, Progress, Timer, duration


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_timer_sections_add_up_to_their_share_of_the_wall_time():
    timer = Timer()
    with timer("a"):
        time.sleep(0.02)
    with timer("a"):
        time.sleep(0.02)
    fractions = timer.fractions()
    assert set(fractions) == {"a"}
    assert 0.5 < fractions["a"] <= 1.0
    assert timer.totals["a"] >= 0.04


class _Clock:
    """Wall time that moves only when a test says so: pace tests that cannot flake."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_redirected_log_gets_a_line_every_minute_of_wall_time_however_many_frames(caplog):
    stream, clock = io.StringIO(), _Clock()  # not a terminal
    progress = Progress(total=100_000, initial=0, enabled=True, every_s=60, seed_frames=300,
                        stream=stream, clock=clock)
    with caplog.at_level(logging.INFO, logger="ellm"):
        for frame in range(1, 3001):
            clock.now += 0.125 if frame <= 960 else 0.25  # 8 frames/s for 2 min, then 4
            if frame == 2000:
                progress.set_status("eps 0.500 | intrinsic return 1.99")
            progress.update(frame)
    progress.close()
    lines = [r.getMessage() for r in caplog.records]
    # 630 s of wall time: one estimate, then a line every 60 s, whatever the frames/s.
    estimate, *pace = lines
    assert estimate == ("time estimate: about 3.5 h for the remaining 99520 frames, a projection "
                        "at 8.0 frames/s over the first 480 frames (60 s of wall time, "
                        "evaluations included; 300 of them seed frames, faster without updates)")
    assert [line.split()[1] for line in pace] == [
        f"{frame}/100000" for frame in (480, 960, 1200, 1440, 1680, 1920, 2160, 2400, 2640, 2880)]
    assert pace[0] == "frame 480/100000 (0%) | 8.0 frames/s | about 3.5 h left"
    assert pace[2].startswith("frame 1200/100000 (1%) | 4.0 frames/s | about 4.1 h left")
    assert "intrinsic return 1.99" in pace[6] and "intrinsic" not in pace[5]
    assert stream.getvalue() == ""  # nothing written with \r


def test_a_terminal_gets_its_estimate_logged_once_beside_the_bar(caplog):
    stream, clock = _Tty(), _Clock()
    progress = Progress(total=1000, initial=200, enabled=True, every_s=30, stream=stream,
                        clock=clock)
    with caplog.at_level(logging.INFO, logger="ellm"):
        for frame in range(201, 1001):
            clock.now += 0.5
            progress.update(frame)
    progress.close()
    (estimate,) = [r.getMessage() for r in caplog.records]  # a resumed run: from frame 200
    assert estimate.startswith("time estimate: about 6.2 min for the remaining 740 frames, a "
                               "projection at 2.0 frames/s over the first 60 frames (30 s")
    assert "seed frames" not in estimate and "1000/1000" in stream.getvalue()


def test_every_seconds_is_due_once_per_stretch_and_always_at_zero():
    clock = _Clock()
    every = EverySeconds(10, clock)
    ticks = []
    for _ in range(50):
        clock.now += 1
        ticks.append(every())
    assert [i + 1 for i, due in enumerate(ticks) if due] == [10, 20, 30, 40, 50]
    assert every.elapsed() == 50
    always = EverySeconds(0, clock)
    assert always() and always()
    assert [duration(s) for s in (45, 750, 4 * 3600)] == ["45 s", "12.5 min", "4.0 h"]


def test_a_terminal_gets_a_bar_and_no_log_lines(caplog):
    stream = _Tty()
    progress = Progress(total=100, initial=0, enabled=True, every_s=3600, stream=stream)
    with caplog.at_level(logging.INFO, logger="ellm"):
        for frame in range(1, 101):
            progress.update(frame)
    progress.close()
    assert not caplog.records
    assert "100/100" in stream.getvalue()


def test_disabled_progress_prints_nothing(caplog):
    stream = _Tty()
    progress = Progress(total=100, initial=0, enabled=False, every_s=0, stream=stream)
    with caplog.at_level(logging.INFO, logger="ellm"):
        for frame in range(1, 101):
            progress.update(frame)
    assert not caplog.records and stream.getvalue() == ""


def test_the_pace_of_the_lines_is_a_checked_config_key():
    from hydra import compose, initialize_config_dir

    from ellm.run.config import ConfigError, validate

    root = Path(__file__).resolve().parents[1]
    with initialize_config_dir(str(root), version_base="1.3"):
        assert compose("config").progress_every_s == 60
        bad = compose("config", overrides=["progress_every_s=-1"])
    with pytest.raises(ConfigError, match="progress_every_s"):
        validate(bad)
