"""The fast tier (``bash scripts/test.sh -m "not e2e and not slow"``, README: Tests) starts no
run, entry point, server or worker process: a test that starts one is marked ``e2e`` or
``slow``. Read from the source (AST): a test starts one when it, or a function or fixture of
its module that it uses, calls ``run_train``/``run_entry``/``ActorPool``/``Sandbox``/
``supervise``, takes the ``train`` fixture, or uses ``subprocess`` or ``multiprocessing``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SPAWNING_CALLS = {"run_train", "run_entry", "ActorPool", "Sandbox", "supervise"}
SPAWNING_FIXTURES = {"train"}
SPAWNING_MODULES = {"subprocess", "multiprocessing"}
TIER_MARKS = {"e2e", "slow"}
# Tests that start a short child of their own (no run, entry point or server) and stay in the
# fast tier: each takes a second or two, and needs a second process to test what it tests.
QUICK_CHILDREN = {
    "test_actors.py::test_an_actor_killed_holding_every_shared_lock_stops_the_run_without_waiting":
        "a fork that takes locks and dies",
    "test_interrupt.py::test_an_interrupt_dropped_in_a_callback_is_lost_without_install":
        "a few lines under a signal",
    "test_interrupt.py::test_an_installed_handler_raises_a_dropped_interrupt_at_the_next_check_"
    "quietly": "a few lines under a signal",
    "test_interrupt.py::test_install_keeps_an_ignored_sigint_ignored": "a few lines",
    "test_interrupt.py::test_a_ctrl_c_while_a_file_is_written_waits_until_it_is_in_place":
        "a writer under SIGINT",
    "test_layout.py::test_the_method_pieces_that_need_no_game_load_none": "fresh interpreter",
    "test_layout.py::test_ruff_finds_nothing": "ruff",
    "test_layout_lm.py::test_importing_the_client_loads_no_game_and_no_torch": "fresh interpreter",
    "test_llf_envs.py::test_a_game_imports_neither_the_other_game_nor_llm_or_rl_code":
        "fresh interpreter",
    "test_lm_cache.py::test_concurrent_writers_share_one_cache": "cache writers",
    "test_lm_cache.py::test_killed_writer_leaves_a_sound_cache": "a cache writer, killed",
    "test_lm_client.py::test_cache_shared_across_processes": "a second client",
    "test_lm_oracle.py::test_order_is_deterministic_across_hash_seeds": "fresh interpreters",
    "test_lm_serve.py::test_a_model_process_that_crashes_or_fails_its_check_is_reported":
        "a stand-in model process that crashes",
    "test_lm_serve.py::test_a_crash_while_serving_names_the_requests_in_flight_not_a_guess":
        "a stand-in model process that crashes",
    "test_lm_serve.py::test_a_stopped_server_exits_cleanly": "a stand-in model process",
    "test_replay.py::test_kill_9_while_writing_never_breaks_resume": "a writer, killed",
}


def _marks(nodes: list[ast.expr]) -> set[str]:
    """The ``NAME`` of each ``pytest.mark.NAME`` in ``nodes`` (decorators, ``pytestmark``)."""
    return {n.attr for node in nodes for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
            and n.value.attr == "mark"}


def _starts_a_process(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    if params & SPAWNING_FIXTURES:
        return True
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) in SPAWNING_CALLS:
                return True
        elif isinstance(node, ast.Name) and node.id in SPAWNING_MODULES:
            return True
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            if any(name.split(".")[0] in SPAWNING_MODULES for name in names):
                return True
    return False


def unmarked_spawning_tests(path: Path) -> list[str]:
    """``FILE::TEST`` for each test of ``path`` that starts a process and has no tier mark."""
    tree = ast.parse(path.read_text())
    module_marks = _marks([node.value for node in tree.body if isinstance(node, ast.Assign)
                           and any(getattr(t, "id", None) == "pytestmark"
                                   for t in node.targets)])
    functions: dict[str, tuple[ast.FunctionDef | ast.AsyncFunctionDef, set[str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions[node.name] = (node, set())
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                    functions[sub.name] = (sub, _marks(node.decorator_list))
    spawning = {name for name, (fn, _) in functions.items() if _starts_a_process(fn)}
    grown = True
    while grown:  # through the module's helpers and fixtures, named in a body or as parameters
        grown = False
        for name, (fn, _) in functions.items():
            used = ({n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
                    | {a.arg for a in fn.args.args + fn.args.kwonlyargs})
            if name not in spawning and used & spawning:
                spawning.add(name)
                grown = True
    return [f"{path.name}::{name}" for name, (fn, class_marks) in functions.items()
            if name.startswith("test") and name in spawning
            and not (module_marks | class_marks | _marks(fn.decorator_list)) & TIER_MARKS]


@pytest.mark.parametrize("path", sorted(TESTS.glob("test_*.py")), ids=lambda p: p.name)
def test_every_test_that_starts_a_process_is_marked_e2e_or_slow(path):
    unmarked = [t for t in unmarked_spawning_tests(path) if t not in QUICK_CHILDREN]
    assert not unmarked, ("these start a run, entry point, server or worker: mark them "
                          f"@pytest.mark.e2e (or slow if long) - {unmarked}")


def test_the_quick_children_are_still_tests_that_start_one_unmarked():
    found = {t for path in TESTS.glob("test_*.py") for t in unmarked_spawning_tests(path)}
    assert set(QUICK_CHILDREN) <= found, sorted(set(QUICK_CHILDREN) - found)
