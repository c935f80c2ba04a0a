"""The seams hold: the core of the method imports no game, and each package holds one kind of
thing (games hold no LLM or RL code: test_llf_envs; the LLM-in-the-loop systems sit apart
from the exploration baselines)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GAMES = ("text_crafter", "text_housekeep", "text_craftax")
# Every module of the method outside ellm/games/ must work for any game: it reaches a game only
# through ellm.games (its Game plug-in), never by importing it; and it never imports a tool.
CORE = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ellm").rglob("*.py")
              if "games" not in p.relative_to(ROOT / "ellm").parts)
TOOLS = "ellm_tools"
# The report presents any game's runs too: through each game's GameReport, never its package.
REPORT = sorted(str(p.relative_to(ROOT)) for p in (ROOT / TOOLS / "report").glob("*.py"))
PACKAGES = ("ellm", TOOLS, "llm_in_the_loop", "baselines", "text_game", *GAMES)


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", CORE + REPORT)
def test_no_core_or_report_module_imports_a_game_and_the_method_no_tool(module):
    imported = imported_modules(ROOT / module)
    games = {m for m in imported if m.split(".")[0] in GAMES}
    assert not games, f"{module} imports {sorted(games)}: go through its ellm.games plug-in"
    tools = {m for m in imported if m.split(".")[0] == TOOLS}
    assert module in REPORT or not tools, (f"{module} imports {sorted(tools)}: the method "
                                           "never imports a tool")


def test_the_tools_sit_apart_from_the_method():
    assert len(CORE) > 40  # the walk found the method
    for name in ("report", "lm_quality", "serve.py", "serve_guard.py", "llama.py",
                 "llama_grammar.py", "bench"):
        assert (ROOT / TOOLS / name).exists(), name
    # Every benchmark in one package, the front door (python -m ellm_tools.bench) and the rest.
    assert sorted(p.name for p in (ROOT / TOOLS / "bench").glob("*.py")) == [
        "__init__.py", "__main__.py", "actors.py", "baselines.py", "common.py", "craftax.py",
        "crafter.py", "housekeep.py", "late.py", "lm.py", "loop.py", "replay.py",
        "replay_data.py", "replay_memory.py", "sandbox.py"]
    strays = [p for package in PACKAGES for p in (ROOT / package).rglob("*bench*.py")
              if p.parent != ROOT / TOOLS / "bench" and p.name != "llf_bench.py"]  # LLF-Bench's
    assert not strays, strays
    assert len(REPORT) > 3  # the glob found the report


def test_the_sandbox_is_one_package_that_imports_no_task():
    """The policy-code sandbox (llm_in_the_loop/sandbox/) stands on the standard library and
    numpy: it imports no Meta-World, no game, no task of the LLM-in-the-loop systems and no
    other part of the project; its bench is a tool."""
    sandbox = ROOT / "llm_in_the_loop" / "sandbox"
    modules = sorted(sandbox.glob("*.py"))
    assert [p.name for p in modules] == ["__init__.py", "bwrap.py", "guards.py", "seccomp.py",
                                         "worker.py"]
    assert not list((ROOT / "llm_in_the_loop").glob("sandbox*.py"))
    project = {"llm_in_the_loop", "ellm", TOOLS, "baselines", "text_game", *GAMES}
    for path in modules:
        imported = imported_modules(path)
        foreign = {m for m in imported if m.split(".")[0] in {"metaworld", "mujoco", "gymnasium"}
                   or (m.split(".")[0] in project and not m.startswith("llm_in_the_loop.sandbox"))}
        assert not foreign, f"{path.name} imports {sorted(foreign)}"
        assert "def bench" not in path.read_text(), f"{path.name}: benches live in {TOOLS}"
    assert (ROOT / TOOLS / "bench" / "sandbox.py").exists()


def test_the_method_pieces_that_need_no_game_load_none():
    code = ("import sys, ellm.rollout, ellm.reward, ellm.goals, ellm.methods, ellm.lm; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {GAMES!r}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_baselines_hold_only_plug_ins_of_the_training_loop():
    llm_systems = {m for path in (ROOT / "baselines").glob("*.py")
                   for m in imported_modules(path) if m.startswith("llm_in_the_loop")}
    assert not llm_systems
    assert not (ROOT / "baselines" / "sandbox.py").exists()
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["train.py"]
    assert sorted(p.name for p in ROOT.glob("*.yaml")) == ["config.yaml"]


def test_ruff_finds_nothing():
    """Ruff, as the dev extra installs it (0.17, its default rules), passes on the whole tree."""
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise",
                          "--no-cache", str(ROOT)], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr
