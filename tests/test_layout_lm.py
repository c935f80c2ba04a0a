"""The LLM client (lmclient/) is a package of its own: it imports nothing of the project around
it (no game, no method, no tool), loads neither a game nor torch, and has no import circle."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENT = "lmclient"
MODULES = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
           for p in sorted((ROOT / CLIENT).rglob("*.py"))}
# The project's other packages: every top-level folder with an __init__.py.
PROJECT = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {CLIENT, "tests"}
# What the client must not load: the project, the games' engines, and the learning frameworks.
HEAVY = PROJECT | {"crafter", "craftax", "torch", "jax"}


def imports(module: str) -> set[str]:
    """Every module ``module`` imports, at module level, in functions and under TYPE_CHECKING
    alike, relative imports resolved."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names
                          if f"{base}.{alias.name}" in MODULES)
    return names


def test_the_client_imports_nothing_of_the_project():
    assert len(MODULES) >= 10 and {"ellm", "text_crafter", "text_housekeep"} <= PROJECT
    foreign = {m: sorted(n for n in imports(m) if n.split(".")[0] in PROJECT) for m in MODULES}
    assert not any(foreign.values()), {m: names for m, names in foreign.items() if names}


def test_the_client_has_no_import_circle():
    graph = {m: {n for n in imports(m) if n in MODULES and n != m} for m in MODULES}
    graphlib.TopologicalSorter(graph).prepare()  # CycleError names the circle


def test_importing_the_client_loads_no_game_and_no_torch():
    code = (f"import sys, {', '.join(MODULES)}; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)!r})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_the_moved_names_stay_importable_from_ellm_lm():
    """For one release: the names ellm.lm exported before the client and Crafter's content moved
    out of it are the new homes' own objects."""
    import ellm.lm
    from ellm.games.crafter import oracle, state, suggesters
    from ellm.lm import base
    from lmclient import cache, client, counters

    homes = {"SimpleOracle": oracle, "ORACLE_GOALS": oracle, "TextState": state,
             "build_suggester": suggesters, "LMClient": client, "LMConfigError": client,
             "AnswerCache": cache, "CacheError": cache, "LMCounters": counters}
    assert set(homes) <= set(ellm.lm.__all__)
    for name, home in homes.items():
        assert getattr(ellm.lm, name) is getattr(home, name), name
    assert base.TextState is state.TextState  # the Craftax engine's host reads it there
