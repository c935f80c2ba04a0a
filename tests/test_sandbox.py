"""The sandbox that runs policy code written by a language model: every failure comes back as
text, calls start from the loaded code, a run never waits on a stuck worker and no worker
outlives its run; with and without OS isolation. Code written to escape:
``test_sandbox_escapes.py``; the seccomp filter's program: ``test_sandbox_seccomp.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ellm.errors import ConfigError
from llm_in_the_loop.code_policy.run import CONFIG, validate
from llm_in_the_loop.code_policy.sandbox import GRACE, Sandbox, SandboxUnavailable
from llm_in_the_loop.code_policy.sandbox import bwrap as sandbox_bwrap

pytestmark = pytest.mark.e2e  # each test starts worker processes
ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-0123456789abcdefSANDBOX"
needs_os = pytest.mark.skipif(sandbox_bwrap.problem() is not None,
                              reason=f"no OS sandbox here: {sandbox_bwrap.problem()}")
# Switches off the worker's Python-level guards (its audit hook reads _REFUSED from the
# globals that __import__ carries) and takes its os module: what the OS must then hold against.
BYPASS = ('g = __import__.__globals__\ng["_REFUSED"] = ()\nb = g["builtins"]\n'
          'os = g["sys"].modules["os"]\n')


def keyed_box(monkeypatch: pytest.MonkeyPatch, isolation: str = "os") -> Iterator[Sandbox]:
    """A sandbox started from a run whose environment holds an API key."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with Sandbox(timeout=1.0, memory_mb=512, isolation=isolation) as sandbox:
        yield sandbox


@pytest.fixture(params=[pytest.param("os", marks=needs_os), "none"])
def box(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    yield from keyed_box(monkeypatch, request.param)


def policy(body: str) -> str:
    return "def controller(obs):\n" + "".join(f"    {line}\n" for line in body.splitlines())


def run(box: Sandbox, body: str, arg: object = None) -> tuple[object, str | None]:
    loaded = box.load(policy(body), "controller")
    if not loaded.ok:
        return None, loaded.error
    outcome = box.call(arg)
    return outcome.value, outcome.error


def assert_honest(box: Sandbox) -> None:
    """The next calls of honest code each get their own answer."""
    assert box.load(policy("return [obs, obs * 2]"), "controller").ok
    for x in (3, 5, 8):
        assert box.call(x).value == [x, 2 * x]


def processes() -> dict[int, list[int]]:
    """Children of each process on this machine, by /proc."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if stat and stat.rpartition(")")[2].split()[0] != "Z":
            children[int(stat.rpartition(")")[2].split()[1])].append(int(entry.name))
    return children


def tree(pid: int) -> set[int]:
    """``pid`` and its living descendants."""
    children, found, todo = processes(), set(), [pid]
    while todo:
        found.add(p := todo.pop())
        todo += children.get(p, [])
    return found & ({p for ps in children.values() for p in ps} | {pid})


def worker(box: Sandbox) -> tuple[set[int], set[int]]:
    """The worker's own processes (bwrap's, the worker and the candidate's supervisor) and the
    children that wait for a request or run one (those without children)."""
    found, children = tree(box._proc.pid), processes()
    leaves = {p for p in found if not set(children.get(p, [])) & found}
    return found - leaves, leaves


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def cpu_ticks(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += sum(map(int, Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2]
                             .split()[11:13]))
        except OSError:
            pass
    return total


# ---- the code's own errors ------------------------------------------------------------------
def test_values_and_prints_come_back(box):
    code = ("import numpy as np\nimport math\nprint('thinking')\n"
            "return (np.asarray(obs['x']) * 2).tolist() + [math.pi, np.float32(1.5)]")
    assert box.load(policy(code), "controller").ok
    outcome = box.call({"x": [1, 2]})
    assert outcome.ok and outcome.value == pytest.approx([2, 4, 3.14159265, 1.5])
    assert outcome.printed == "thinking\n"


@pytest.mark.parametrize(("body", "error"), [
    ("return 1 / 0", "ZeroDivisionError: division by zero (line 2: return 1 / 0)"),
    ("return obs['missing']", "KeyError: 'missing' (line 2: return obs['missing'])"),
    ("return open('/etc/hostname').read()", "NameError: name 'open' is not defined"),
    ("import os\nreturn os.getcwd()", "ImportError: policy code may import only"),
    ("import socket\nreturn 1", "ImportError: policy code may import only"),
    ("return np.loadtxt('/etc/hostname').tolist()", "PermissionError:"),
    ("np.save('x.npy', np.zeros(3))\nreturn 1", "PermissionError: open is not allowed"),
    ("return object()", "TypeError: the function returned a object, which is not plain data"),
    ("raise SystemExit(3)", "SystemExit: 3 (line 2: raise SystemExit(3))"),
    ("return controller(obs)", "RecursionError: maximum recursion depth exceeded"),
    ("x = bytearray(2**33)\nreturn 1", "MemoryError: the code used more memory than allowed"),
])
def test_errors_become_text_and_the_worker_goes_on(box, body, error):
    value, got = run(box, body, {"x": 1})
    assert value is None and got is not None and got.startswith(error), got
    assert run(box, "return 7") == (7, None)  # the next code runs


def test_syntax_errors_and_missing_functions_are_load_errors(box):
    assert box.load("def controller(obs)\n    return 1\n", "controller").error == (
        "SyntaxError: expected ':' (line 1: def controller(obs))")
    assert box.load("def act(obs):\n    return 1\n", "controller").error == (
        "the code defines no function controller()")
    assert box.call(1).error == "no code loaded"


def test_time_limit_stops_a_call_and_the_worker_goes_on(box):
    _, error = run(box, "while True:\n    pass")
    assert error == ("TimeoutError: the code took longer than 1 s (the time limit) and was "
                     "stopped")
    assert box.call(None).error.startswith("TimeoutError")  # the same code again
    assert box.restarts == 0  # the worker stopped the call itself
    assert_honest(box)


def test_a_load_has_the_same_time_limit(box):
    assert box.load(policy("return 1"), "controller").ok  # the worker is up
    start = time.monotonic()
    assert box.load("while True:\n    pass\n", "controller").error.startswith("TimeoutError")
    assert time.monotonic() - start < box.timeout + GRACE + 1
    assert_honest(box)


def test_results_too_large_are_refused(box):
    _, error = run(box, "return list(range(400000))")
    assert error == "the code returned more than 1048576 bytes of data"
    assert run(box, "return [1, 2]") == ([1, 2], None)


def test_calls_start_from_the_loaded_code_not_from_the_last_call(box):
    code = "seen = []\ndef controller(obs):\n    seen.append(obs)\n    return len(seen)\n"
    assert box.load(code, "controller").ok
    assert [box.call(i).value for i in range(3)] == [1, 1, 1]
    draws = ("return [random.random(), float(np.random.rand()), "
             "float(np.random.default_rng().random()), float(np.linalg.norm([3, 4]))]")
    assert box.load(policy(draws), "controller").ok
    first, second = box.call(None).value, box.call(None).value
    assert all(a != b for a, b in zip(first[:3], second[:3])) and first[3] == 5.0


# Every string reachable from the frames up the code's stack (locals, objects' attributes but
# modules' and classes', code objects' constants) and memory numpy hands out unwritten, searched
# for a text put together at run time.
SNOOP = """def snoop(parts):
    needle = "".join(parts)
    try:
        1 / 0
    except ZeroDivisionError as e:
        frame = e.__traceback__.tb_frame
    todo, seen, found = [], set(), False
    while frame is not None:
        todo += list(frame.f_locals.values())
        frame = frame.f_back
    while todo and len(seen) < 200000:
        x = todo.pop()
        if id(x) in seen or x is needle:
            continue
        seen.add(id(x))
        if isinstance(x, (str, bytes, bytearray)):
            found = found or needle in (x if isinstance(x, str) else x.decode("latin-1"))
        elif isinstance(x, dict):
            todo += list(x.keys()) + list(x.values())
        elif isinstance(x, (list, tuple, set, frozenset)):
            todo += list(x)
        elif isinstance(x, type(snoop.__code__)):
            todo += list(x.co_consts)
        elif hasattr(x, "__dict__") and not isinstance(x, (type, type(random))):
            todo += list(x.__dict__.values())
    for size in (64, 512, 4096, 1 << 16, 1 << 20):
        found = found or needle.encode() in np.empty(size, np.uint8).tobytes()
    return found
"""


def test_each_candidate_runs_in_processes_that_never_held_another_candidates_code(box):
    secret = f"candidate-one-{time.monotonic_ns()}"
    parts = [secret[:9], secret[9:]]  # the later candidates never spell it out
    first = SNOOP + f"def controller(obs):\n    return ['{secret}', snoop({parts!r})]\n"
    assert box.load(first, "controller").ok
    assert box.call(None).value == [secret, True]  # the search finds what a process holds
    time.sleep(0.2)  # the call's child is gone
    before, _ = worker(box)
    later = SNOOP + (f"print(snoop({parts!r}))\n"  # at its load, then at each call
                     f"def controller(obs):\n    return snoop({parts!r})\n")
    loaded = box.load(later, "controller")
    assert (loaded.ok, loaded.printed) == (True, "False\n")
    assert box.call(None).value is False
    time.sleep(0.2)
    after, _ = worker(box)
    # The first candidate's supervisor is gone; a new one, forked by the worker, serves this.
    assert len(before - after) == 1 and len(after - before) == 1, (before, after)
    assert box.restarts == 0


def test_arguments_must_be_plain_data(box):
    assert box.load(policy("return obs"), "controller").ok
    assert box.call(object()).error.startswith("the input cannot be sent to the code")


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="timeout must be > 0"):
        Sandbox(timeout=0)
    with pytest.raises(ValueError, match="isolation one of"):
        Sandbox(isolation="docker")


# ---- the worker's life ----------------------------------------------------------------------
PARENT = """import sys
from llm_in_the_loop.code_policy.sandbox import Sandbox
box = Sandbox(timeout=60, isolation=sys.argv[1])
box.load("def f(x):\\n    while True:\\n        pass\\n", "f")
print(box._proc.pid, flush=True)
box.call(1)
"""


def wait_until(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("isolation", [pytest.param("os", marks=needs_os), "none"])
def test_no_worker_outlives_a_killed_run(tmp_path, isolation):
    temp = set(os.listdir(tempfile.gettempdir()))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen([sys.executable, "-c", PARENT, isolation], stdout=subprocess.PIPE,
                          env=env, cwd=tmp_path) as parent:
        worker = int(parent.stdout.readline())
        # (bwrap, its init,) the worker, the candidate's supervisor, the call's child
        spinning = 5 if isolation == "os" else 3
        assert wait_until(lambda: len(tree(worker)) == spinning), tree(worker)
        pids = tree(worker)
        parent.kill()
        parent.wait()
        assert wait_until(lambda: not any(map(alive, pids))), [p for p in pids if alive(p)]
    assert not [name for name in set(os.listdir(tempfile.gettempdir())) - temp
                if "sandbox" in name]


def test_a_stuck_worker_never_blocks_the_run(box):
    assert box.load(policy("return len(obs)"), "controller").ok
    time.sleep(0.2)  # the load's child is gone
    for pid in tree(box._proc.pid):
        os.kill(pid, signal.SIGSTOP)
    start = time.monotonic()
    outcome = box.call("x" * 20_000_000)  # far more than a pipe holds
    assert time.monotonic() - start < box.timeout + GRACE + 2
    assert outcome.error.startswith("TimeoutError") and box.restarts == 1
    assert box.call("abc").value == 3  # a new worker, the same code


def test_without_the_os_sandbox_code_is_refused_unless_none(monkeypatch, caplog):
    monkeypatch.setattr(sandbox_bwrap, "candidates", list)  # no bwrap, as on a bare machine
    sandbox_bwrap.usable.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
            Sandbox()
        cfg = OmegaConf.load(CONFIG)
        cfg.env_spec.lm_spec.base_url = "http://127.0.0.1:9/v1"
        with pytest.raises(ConfigError, match="sandbox=os: bubblewrap is not installed.*"
                                              "sandbox=none runs it without OS isolation"):
            validate(cfg)
        cfg.sandbox = "none"
        validate(cfg)
        with Sandbox(timeout=1.0, isolation="none") as box:
            assert "WITHOUT OS isolation" in caplog.text
            assert box.load(policy("return obs + 1"), "controller").ok
            assert box.call(1).value == 2
    finally:
        sandbox_bwrap.usable.cache_clear()
