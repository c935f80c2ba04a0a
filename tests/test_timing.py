"""The loop's timers and progress display: a bar on a terminal, plain lines in a log."""

from __future__ import annotations

import io
import logging
import time

from ellm.timing import Progress, Timer


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


def test_a_redirected_log_gets_one_line_every_n_frames_and_no_carriage_returns(caplog):
    stream = io.StringIO()  # not a terminal
    progress = Progress(total=1000, initial=0, enabled=True, every=250, stream=stream)
    with caplog.at_level(logging.INFO, logger="ellm"):
        for frame in range(1, 1001):
            if frame == 600:
                progress.set_status("eps 0.500 | intrinsic return 1.99")
            progress.update(frame)
    progress.close()
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split()[1] for line in lines] == ["250/1000", "500/1000", "750/1000",
                                                    "1000/1000"]
    assert all("frames/s" in line and "nan" not in line for line in lines)
    assert "intrinsic return 1.99" in lines[2] and "intrinsic" not in lines[0]
    assert stream.getvalue() == ""  # nothing written with \r


def test_a_terminal_gets_a_bar_and_no_log_lines(caplog):
    stream = _Tty()
    progress = Progress(total=100, initial=0, enabled=True, every=10, stream=stream)
    with caplog.at_level(logging.INFO, logger="ellm"):
        for frame in range(1, 101):
            progress.update(frame)
    progress.close()
    assert not caplog.records
    assert "100/100" in stream.getvalue()


def test_disabled_progress_prints_nothing(caplog):
    stream = _Tty()
    progress = Progress(total=100, initial=0, enabled=False, every=10, stream=stream)
    with caplog.at_level(logging.INFO, logger="ellm"):
        for frame in range(1, 101):
            progress.update(frame)
    assert not caplog.records and stream.getvalue() == ""
