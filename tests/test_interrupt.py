"""ellm.loop.interrupt: a Ctrl-C that lands in a ctypes callback (numba's, in Crafter's world
generation) is dropped by Python; once installed, it is raised again at the next check."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

# SIGINT arrives while a ctypes callback runs (qsort's comparison, as llvmlite's object-cache
# callbacks run inside numba): Python prints the KeyboardInterrupt as "Exception ignored" and
# qsort goes on. Then the loop's check.
SCRIPT = textwrap.dedent("""
    import ctypes, os, signal, sys, time
    from ellm.loop import interrupt
    # as a terminal's Ctrl-C finds it (pytest run as a background job passes SIGINT ignored on)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.argv[1] == "installed":
        interrupt.install()
    libc = ctypes.CDLL(None)
    COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                               ctypes.POINTER(ctypes.c_int))
    def compare(a, b):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs here, inside the callback
        return a[0] - b[0]
    values = (ctypes.c_int * 2)(2, 1)
    libc.qsort(values, 2, ctypes.sizeof(ctypes.c_int), COMPARE(compare))
    print("went on after the callback", flush=True)
    try:
        interrupt.check()
    except KeyboardInterrupt:
        print("raised at the check", flush=True)
        sys.exit(130)
""")


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], check=False, capture_output=True,
                          text=True, timeout=60)


def test_an_interrupt_dropped_in_a_callback_is_lost_without_install():
    done = _run("plain")
    assert done.returncode == 0, done.stderr
    assert "went on after the callback" in done.stdout
    assert "Exception ignored" in done.stderr and "KeyboardInterrupt" in done.stderr


def test_an_installed_handler_raises_a_dropped_interrupt_at_the_next_check_quietly():
    done = _run("installed")
    assert done.returncode == 130, done.stderr
    assert "raised at the check" in done.stdout
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("ignored", [True, False])
def test_install_keeps_an_ignored_sigint_ignored(ignored):
    script = textwrap.dedent("""
        import signal, sys
        from ellm.loop import interrupt
        ignore = sys.argv[1] == "True"
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignore else signal.default_int_handler)
        interrupt.install()
        print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(ignored)], check=False,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == str(ignored), done.stderr


def test_a_ctrl_c_while_a_file_is_written_waits_until_it_is_in_place(tmp_path):
    """Raised inside torch.save, a KeyboardInterrupt became a RuntimeError of torch's zip
    writer (a traceback, exit code 1); held back, it comes once the snapshot is written."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        import torch
        from ellm.loop import interrupt
        from ellm.run.atomic import atomic_write
        signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupt.install()
        path = sys.argv[1]

        class Slow:  # pickled by torch.save: the SIGINT arrives mid-write
            def __reduce__(self):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                return (dict, ())

        try:
            with atomic_write(path) as f:
                torch.save({"first": torch.zeros(1000), "slow": Slow(),
                            "last": torch.ones(1000)}, f)
        except KeyboardInterrupt:
            print("interrupted after the write", flush=True)
            sys.exit(130)
    """)
    path = tmp_path / "snapshot.pt"
    done = subprocess.run([sys.executable, "-c", script, str(path)], check=False,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert "interrupted after the write" in done.stdout
    assert torch.load(path, weights_only=False)["last"].sum() == 1000
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot.pt"]
