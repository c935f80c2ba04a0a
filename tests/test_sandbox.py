"""The sandbox that runs policy code written by a language model: every failure comes back as
text, the worker survives or is replaced, and files, processes and modules stay out of reach."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm_in_the_loop.sandbox import Sandbox

pytestmark = pytest.mark.e2e  # each test starts worker processes


@pytest.fixture
def box() -> Iterator[Sandbox]:
    with Sandbox(timeout=1.0, memory_mb=512) as sandbox:
        yield sandbox


def run(box: Sandbox, body: str, arg: object = None) -> tuple[object, str | None]:
    code = "def controller(obs):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    loaded = box.load(code, "controller")
    if not loaded.ok:
        return None, loaded.error
    outcome = box.call(arg)
    return outcome.value, outcome.error


def test_values_and_prints_come_back(box):
    code = ("import numpy as np\nimport math\nprint('thinking')\n"
            "return (np.asarray(obs['x']) * 2).tolist() + [math.pi, np.float32(1.5)]")
    assert box.load("def controller(obs):\n    " + code.replace("\n", "\n    "), "controller").ok
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


def test_files_and_processes_are_refused_even_through_frames(box):
    body = ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    f = e.__traceback__.tb_frame\n"
            "    while f.f_back:\n        f = f.f_back\n    return f.f_globals['os'].system('true')")
    _, error = run(box, body)
    assert error.startswith("PermissionError: os.system is not allowed")
    _, error = run(box, body.replace("['os'].system('true')", "['io'].open('/etc/hostname')"))
    assert error.startswith("PermissionError: open is not allowed")


def test_syntax_errors_and_missing_functions_are_load_errors(box):
    assert box.load("def controller(obs)\n    return 1\n", "controller").error == (
        "SyntaxError: expected ':' (line 1: def controller(obs))")
    assert box.load("def act(obs):\n    return 1\n", "controller").error == (
        "the code defines no function controller()")
    assert box.call(1).error == "no code loaded"


def test_time_limit_stops_the_code_and_a_new_worker_takes_over(box):
    _, error = run(box, "while True:\n    pass")
    assert error == ("TimeoutError: the code took longer than 1 s (the time limit) and was "
                     "stopped")
    assert box.restarts == 1
    assert box.call(None).error.startswith("TimeoutError")  # the same code, reloaded, again
    assert run(box, "return 'alive'") == ("alive", None)


def test_results_too_large_are_refused(box):
    _, error = run(box, "return list(range(400000))")
    assert error == "the code returned more than 1048576 bytes of data"
    assert run(box, "return [1, 2]") == ([1, 2], None)


def test_arguments_must_be_plain_data(box):
    assert box.load("def controller(obs):\n    return obs\n", "controller").ok
    assert box.call(object()).error.startswith("the input cannot be sent to the code")


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="timeout must be > 0"):
        Sandbox(timeout=0)
