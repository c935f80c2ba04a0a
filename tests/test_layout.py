"""The seams hold: the core of the method imports no game, and each package holds one kind of
thing (games hold no LLM or RL code: test_llf_envs; the LLM-in-the-loop systems sit apart
from the exploration baselines). No module imports another in a circle, takes another
module's private name or reaches into another package's objects by their private names."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
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
PACKAGES = ("ellm", "lmclient", TOOLS, "llm_in_the_loop", "baselines", "text_game", *GAMES)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# Every module of the project, by its import name.
MODULES = {_module_name(p): p for package in PACKAGES
           for p in sorted((ROOT / package).rglob("*.py"))}


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
    for name in ("report", "lm_quality", "serve.py", "serve_guard.py", "packaged_models.py",
                 "llama.py", "llama_grammar.py", "bench"):
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
    """The policy-code sandbox (llm_in_the_loop/code_policy/sandbox/) stands on the standard
    library and numpy: it imports no Meta-World, no game, no task of the LLM-in-the-loop systems
    and no other part of the project; its bench is a tool."""
    sandbox = ROOT / "llm_in_the_loop" / "code_policy" / "sandbox"
    modules = sorted(sandbox.glob("*.py"))
    assert [p.name for p in modules] == ["__init__.py", "bwrap.py", "guards.py", "seccomp.py",
                                         "worker.py"]
    assert not list((ROOT / "llm_in_the_loop").rglob("sandbox*.py"))
    project = {"llm_in_the_loop", "ellm", TOOLS, "baselines", "text_game", *GAMES}
    for path in modules:
        imported = imported_modules(path)
        foreign = {m for m in imported if m.split(".")[0] in {"metaworld", "mujoco", "gymnasium"}
                   or (m.split(".")[0] in project
                       and not m.startswith("llm_in_the_loop.code_policy.sandbox"))}
        assert not foreign, f"{path.name} imports {sorted(foreign)}"
        assert "def bench" not in path.read_text(), f"{path.name}: benches live in {TOOLS}"
    assert (ROOT / TOOLS / "bench" / "sandbox.py").exists()


def test_the_method_pieces_that_need_no_game_load_none():
    code = ("import sys, ellm.loop.rollout, ellm.reward, ellm.goals, ellm.method, ellm.lm; "
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


@functools.cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text())


def _project_module(name: str) -> str | None:
    """The project module that importing ``name`` names: itself, or the package it is in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _from_base(module: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in ``module`` imports from, a relative one resolved."""
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    parts = package.split(".")
    return ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))


def project_imports(module: str) -> Iterator[tuple[str, str | None, int]]:
    """(project module, the name taken from it or None, line) of every import in ``module``: at
    module level, in functions and under TYPE_CHECKING alike, relative ones resolved."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if target := _project_module(alias.name):
                    yield target, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    yield f"{base}.{alias.name}", None, node.lineno
                elif target := _project_module(base):
                    yield target, alias.name, node.lineno


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    """Each project module -> the project modules it imports."""
    return {m: frozenset(t for t, _, _ in project_imports(m) if t != m) for m in MODULES}


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest import cycle from ``start`` back to it (breadth first), or None."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for after in sorted(graph[node]):
            if after == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if after not in parent:
                parent[after] = node
                queue.append(after)
    return None


# Import edges that close a circle in code others are reshaping right now, each to go once its
# owner has cut it: the report's summary names the Report of the package's __init__ (which
# imports the summary) in its annotations.
PENDING_EDGES = {("ellm_tools.report.summary", "ellm_tools.report")}


def test_no_import_circle_in_the_project():
    assert len(MODULES) > 150 and "ellm.loop.workspace" in MODULES  # the walk found the project
    graph = {m: set(targets) for m, targets in import_graph().items()}
    for source, target in PENDING_EDGES:
        assert target in graph[source], f"{source} no longer imports {target}: drop the exemption"
        graph[source].discard(target)
    cycles = {frozenset(c): c for m in graph if (c := _cycle_through(graph, m))}
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles.values())


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@functools.cache
def _privates_defined(module: str) -> tuple[set[str], set[str]]:
    """The private attributes ``module`` gives its objects (set on self or cls, or defined in a
    class body), and its private module-level names."""
    attrs: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ClassDef):
            attrs |= _names_defined(node.body)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            attrs.add(node.attr)
    names = _names_defined(_tree(module).body)
    return {a for a in attrs if _private(a)}, {n for n in names if _private(n)}


def _names_defined(body: list[ast.stmt]) -> set[str]:
    """The names a block's own statements define: functions, classes and assigned names."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) else [])
        names.update(n.id for t in targets for n in ast.walk(t)
                     if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


@functools.cache
def _object_privates_by_package() -> dict[str, set[str]]:
    """The private attributes each package gives its objects."""
    owners: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for m in MODULES:
        owners[m.split(".")[0]] |= _privates_defined(m)[0]
    return owners


def _bound_modules(module: str) -> tuple[dict[str, str], set[str]]:
    """The names ``module`` binds to project modules by importing them (name -> module, with
    ``import a.b`` binding ``a``), and the names it binds from outside the project."""
    project: dict[str, str] = {}
    outside: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                if not _project_module(alias.name):
                    outside.add(name)
                else:
                    project[name] = alias.name if alias.asname else name
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            for alias in node.names:
                name = alias.asname or alias.name
                if f"{base}.{alias.name}" in MODULES:
                    project[name] = f"{base}.{alias.name}"
                elif not _project_module(base):
                    outside.add(name)
    return project, outside


def _dotted(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute) and (head := _dotted(node.value)):
        return [*head, node.attr]
    return None


def private_reads(module: str) -> Iterator[tuple[str, str]]:
    """(attribute, where and what) of each of ``module``'s reads of a private attribute of
    another package's objects (``x._ends``, ``y._it._workers``, ``x`` not ``self``, ``cls`` or
    ``super()``: an attribute that package gives its objects, where ``module`` imports it, at
    any remove) or of another module's private name (``module._name``). Dunders, attributes of
    its own package's objects and third-party privates (``os._exit``) are left alone."""
    package = module.split(".")[0]
    reached, queue = {module}, deque([module])  # the modules whose objects it may hold
    while queue:
        for target in import_graph()[queue.popleft()] - reached:
            reached.add(target)
            queue.append(target)
    others = {m.split(".")[0] for m in reached} - {package}
    owners = _object_privates_by_package()
    bound, outside = _bound_modules(module)
    for node in ast.walk(_tree(module)):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        base = _dotted(node.value)
        if base and base[0] in ("self", "cls") or (
                isinstance(node.value, ast.Call) and _dotted(node.value.func) == ["super"]):
            continue
        if base and base[0] in bound:
            named = ".".join([bound[base[0]], *base[1:]])
            if named in MODULES:
                if named != module and node.attr in _privates_defined(named)[1]:
                    yield node.attr, f"{module}:{node.lineno} reads {named}.{node.attr}"
                continue
        if base and base[0] in outside:
            continue
        if theirs := sorted(p for p in others if node.attr in owners[p]):
            yield node.attr, (f"{module}:{node.lineno} reads {ast.unparse(node)} "
                              f"({', '.join(theirs)})")


def test_no_module_imports_another_modules_private_name():
    taken = [f"{m}:{line} imports {name} from {target}" for m in MODULES
             for target, name, line in project_imports(m)
             if name and _private(name) and target != m]
    assert not taken, "\n".join(taken)


def test_no_module_reads_another_packages_private_attributes():
    reads = [read for m in MODULES for _, read in private_reads(m)]
    assert not reads, "\n".join(reads)
