"""Code written to escape the sandbox, family by family: routes from the policy's namespace to
``os``, files, sockets, processes and threads, signals, the environment, forged answers. The
Python-level guards are switched off first (:data:`BYPASS`): the OS must hold. Each test looks
at the real effect (the file, the socket, the process), then checks that the next honest call
gets its own answer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_sandbox import (  # tests/ is on sys.path, as for conftest
    BYPASS,
    KEY,
    ROOT,
    assert_honest,
    cpu_ticks,
    keyed_box,
    needs_os,
    policy,
    run,
    worker,
)

from llm_in_the_loop.code_policy.sandbox import Sandbox
from llm_in_the_loop.code_policy.sandbox import bwrap as sandbox_bwrap

pytestmark = pytest.mark.e2e


@pytest.fixture
def box(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    yield from keyed_box(monkeypatch)


ROUTES = {  # ways from the policy's namespace to the os module; each then reads a file
    "random._os": "os = random._os",
    "__import__.__globals__": 'os = __import__.__globals__["sys"].modules["os"]',
    "subclasses": ('w = [c for c in ().__class__.__base__.__subclasses__() '
                   'if c.__name__ == "_wrap_close"][0]\nos = w.__init__.__globals__["sys"]'
                   '.modules["os"]'),
    "traceback frames": ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
                         "    f = e.__traceback__.tb_frame\nwhile f.f_back:\n    f = f.f_back\n"
                         'os = f.f_globals["sys"].modules["os"]'),
    "generator frames": ("def walk():\n    yield it.gi_frame.f_back\nit = walk()\n"
                         "f = next(it)\nwhile f.f_back:\n    f = f.f_back\n"
                         'os = f.f_globals["sys"].modules["os"]'),
    "sys._getframe": 'os = b.__import__("sys")._getframe(1).f_globals["os"]',
    "a module's __loader__": 'os = type(np.__loader__).get_data.__globals__["_os"]',
    "importlib internals": ('imp = [c for c in object.__subclasses__() '
                            'if c.__name__ == "BuiltinImporter"][0]\n'
                            'os = imp.find_spec.__func__.__globals__["_bootstrap_external"]._os'),
}
READ = ("try:\n    data = os.read(os.open(obs, os.O_RDONLY), 200).decode()\n"
        "except OSError as e:\n    data = type(e).__name__\nreturn [os.getpid() > 0, data]")


@pytest.fixture
def secret(tmp_path: Path) -> tuple[str, str]:
    token = f"secret-{os.getpid()}-{time.monotonic_ns()}"
    path = tmp_path / "secret.txt"
    path.write_text(token)
    return str(path), token


@needs_os
@pytest.mark.parametrize("route", ROUTES)
def test_every_route_to_os_reaches_it_and_the_os_still_holds(box, secret, route):
    body = BYPASS.replace('os = g["sys"].modules["os"]\n', "") + ROUTES[route] + "\n" + READ
    assert box.load(policy(body), "controller").ok
    outcome = box.call(secret[0])
    # os reached; the filter refuses to open any file (and the file is not mounted)
    assert outcome.value == [True, "PermissionError"], outcome
    assert secret[1] not in repr(outcome)
    assert_honest(box)


@needs_os
def test_files_are_out_of_reach(box, secret, tmp_path):
    readme = (ROOT / "README.md").read_text().splitlines()[0]
    for path in (secret[0], str(ROOT / "README.md"), "/etc/hostname", "/etc/passwd",
                 sandbox_bwrap.numpy_site() + "/numpy/__init__.py"):
        value, error = run(box, BYPASS + READ, path)
        assert value == [True, "PermissionError"], (path, value, error)
        assert secret[1] not in repr(value) and readme not in repr(value)
    _, error = run(box, BYPASS + 'return b.open("/etc/hostname").read()')  # the review's
    assert error.startswith("PermissionError"), error
    _, error = run(box, BYPASS + "return sorted(os.listdir('/'))")
    assert error.startswith("PermissionError"), error  # no directory can be listed either
    targets = [tmp_path / "made", Path(tempfile.gettempdir()) / f"ellm-made-{os.getpid()}",
               Path(sandbox_bwrap.numpy_site()) / "numpy" / "made", Path("/made")]
    write = ("out = []\nfor p in obs:\n    try:\n"
             "        os.write(os.open(p, os.O_WRONLY | os.O_CREAT), b'x')\n"
             "        out.append('written')\n    except OSError as e:\n"
             "        out.append(type(e).__name__)\nreturn out")
    value, error = run(box, BYPASS + write, [str(t) for t in targets])
    assert "written" not in value, value
    assert not any(t.exists() for t in targets)
    assert_honest(box)


@needs_os
def test_sockets_reach_nothing(box):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        body = BYPASS + (
            "out = []\ntry:\n    s = b.__import__('socket')\n"
            "    s.create_connection(('127.0.0.1', obs), timeout=0.3)\n    out.append('connected')\n"
            "except OSError as e:\n    out.append(type(e).__name__)\n"
            "ctypes = b.__import__('ctypes')\nout.append(ctypes.CDLL(None).socket(2, 1, 0))\n"
            "return out")
        value, error = run(box, body, port)
        assert value == ["PermissionError", -1], (value, error)
        with pytest.raises(TimeoutError):
            listener.accept()  # no connection ever arrived
    assert_honest(box)


SPIN = ("_thread = b.__import__('_thread')\ndef spin():\n    while True:\n        pass\n"
        "return _thread.start_new_thread(spin, ())")


@needs_os
@pytest.mark.parametrize(("attack", "expected"), [
    ("return os.fork()", "PermissionError: [Errno 1]"),
    ("return os.system('true')", 127 << 8),  # the shell never ran (0 if it had)
    ("return b.__import__('subprocess').run(['id']).returncode", "PermissionError: [Errno 1]"),
    ("os.execv('/usr/bin/id', ['id'])", "PermissionError: [Errno 1]"),
    ("return b.__import__('ctypes').CDLL(None).fork()", -1),
    (SPIN, "RuntimeError: can't start new thread"),
])
def test_no_process_or_thread_outlives_its_call(box, attack, expected):
    assert box.load(policy("return 1"), "controller").ok
    time.sleep(0.2)  # the load's child is gone
    before, _ = worker(box)
    value, error = run(box, BYPASS + attack)
    assert value == expected if isinstance(expected, int) else error.startswith(expected), (
        value, error)
    time.sleep(0.2)
    after, waiting = worker(box)
    # The same processes, but the new candidate's supervisor; the next call's child
    assert len(after) == len(before) and len(after - before) == 1, (before, after)
    assert len(waiting) == 1, waiting
    assert all(len(os.listdir(f"/proc/{pid}/task")) == 1 for pid in after | waiting)  # threads
    ticks = cpu_ticks(after | waiting)
    time.sleep(0.5)
    assert cpu_ticks(after | waiting) - ticks < 10  # nothing spins (100 ticks a second)
    assert_honest(box)


@needs_os
def test_no_other_process_can_be_signalled(box):
    with subprocess.Popen(["sleep", "60"]) as victim:
        body = BYPASS + ("out = []\nfor pid, sig in ((os.getppid(), 9), (obs, 9), (1, 9), "
                         "(-1, 9), (0, 19)):\n    try:\n        os.kill(pid, sig)\n"
                         "        out.append('sent')\n    except OSError as e:\n"
                         "        out.append(type(e).__name__)\nreturn out")
        value, error = run(box, body, victim.pid)
        assert value == ["PermissionError"] * 5, (value, error)
        assert victim.poll() is None  # still running
        victim.kill()
    assert box.restarts == 0  # the worker itself was not hurt
    assert_honest(box)


@needs_os
def test_the_environment_and_proc_are_out_of_reach(box):
    paths = ["/proc/self/environ", f"/proc/{os.getpid()}/environ", "/proc/1/environ"]
    body = BYPASS + ("out = [dict(os.environ)]\nfor p in obs + ['/proc/%d/environ' % "
                     "os.getppid()]:\n    try:\n        out.append(os.read(os.open(p, 0), 4096)"
                     ".decode())\n    except OSError as e:\n        out.append(type(e).__name__)"
                     "\nreturn out")
    value, error = run(box, body, paths)
    assert error is None and KEY not in repr(value)
    assert value[1:] == ["PermissionError"] * 4
    assert "OPENAI_API_KEY" not in value[0]
    assert_honest(box)


@pytest.mark.parametrize("forged", [b'{"ok": true, "value": "FORGED"}\n', b"1\n",
                                    b'5\n{"value": "FORGED", "error": null}'])
def test_bytes_the_code_writes_are_never_an_answer(box, forged):
    body = f"random._os.write(1, {forged!r})\nrandom._os.write(2, {forged!r})\nreturn obs"
    assert box.load(policy(body), "controller").ok
    assert [box.call(x).value for x in ("a", "b")] == ["a", "b"]
    value, error = run(box, f"random._os.write(1, {forged!r})\nrandom._os._exit(0)")
    assert value is None and error == ("the code's process ended without an answer (exit "
                                       "code 0)")
    assert box.restarts == 0
    assert_honest(box)


@needs_os
def test_the_code_holds_no_way_back_to_the_run(box):
    body = BYPASS + ("out = []\nfor fd in range(4096):\n    try:\n        os.fstat(fd)\n"
                     "        out.append(fd)\n    except OSError:\n        pass\nreturn out")
    assert run(box, body) == ([1, 2], None)  # its own pipe to the worker, nothing else


# ---- resources: nothing shared outside the process, nothing left for the next candidate ----
LIBC = 'ctypes = g["sys"].modules["ctypes"]\nlibc = ctypes.CDLL(None, use_errno=True)\n'
HOSTILE = {
    # System V shared memory, semaphores, queues: made, and left for the next candidate
    "sysv": ("out = [libc.shmget(0, 1 << 26, 0o1666), libc.semget(0, 1, 0o1666), "
             "libc.msgget(0, 0o1666)]\nreturn out + [ctypes.get_errno()]"),
    "memfd": "return [libc.memfd_create(b'x', 0), ctypes.get_errno()]",
    # Another process's priority, scheduler and limits: the worker is the code's parent
    "priority": "return [libc.setpriority(0, os.getppid(), 19), ctypes.get_errno()]",
    "scheduler": ("p = ctypes.c_int(0)\nreturn [libc.sched_setscheduler(os.getppid(), 5, "
                  "ctypes.byref(p)), ctypes.get_errno()]"),
    "limits": ("lim = (ctypes.c_ulong * 2)(1 << 20, 1 << 20)\n"
               "return [libc.prlimit(os.getppid(), 9, lim, None), ctypes.get_errno()]"),
    "own limits": ("lim = (ctypes.c_ulong * 2)(1 << 62, 1 << 62)\n"
                   "return [libc.setrlimit(9, lim), ctypes.get_errno()]"),
}


@needs_os
@pytest.mark.parametrize("attack", HOSTILE)
def test_code_cannot_hold_resources_or_reach_the_next_candidate(box, attack):
    value, error = run(box, BYPASS + LIBC + HOSTILE[attack])
    assert error is None, error
    *results, errno_value = value
    assert all(r == -1 for r in results) and errno_value == 1, value  # -1, EPERM
    # The next, honest candidate runs as it would alone: full speed, its own answer.
    assert_honest(box)
    start = time.monotonic()
    value, error = run(box, "total = 0\nfor i in range(10 ** 6):\n    total += i\nreturn total")
    assert (value, error) == (sum(range(10 ** 6)), None)
    assert time.monotonic() - start < 5


@needs_os
def test_the_root_holds_only_the_interpreter_numpy_and_their_libraries():
    walk = ("import os, json\nfiles = []\nfor top, dirs, names in os.walk('/'):\n"
            "    files += [os.path.join(top, n) for n in names]\nprint(json.dumps(files))")
    bwrap, _ = sandbox_bwrap.usable()
    done = subprocess.run([*sandbox_bwrap.sandbox_args(bwrap), "--",
                           os.path.realpath(sys.executable), "-I", "-S", "-c", walk],
                          capture_output=True, text=True, timeout=120, check=True, env={})
    files = json.loads(done.stdout)
    assert not any(part in f for f in files for part in (
        "site-packages/torch", "site-packages/ellm", "/etc/passwd", "libssl", "libsqlite",
        "libX11", "libcurl"))
    base_site = sysconfig.get_paths(vars={"base": sys.base_prefix})["purelib"]
    assert not any(f.startswith(base_site + "/") for f in files)  # the interpreter's packages
    assert any(f.endswith("numpy/__init__.py") for f in files)
    assert any(f.endswith("/json/__init__.py") for f in files)  # the standard library
    # The standard library (with its tests) and numpy: ~9k files here; the host root held ~113k.
    assert len(files) < 20_000, len(files)
