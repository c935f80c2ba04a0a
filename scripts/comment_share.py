"""Share of each top-level package's non-blank lines that are comments or docstrings.

    python scripts/comment_share.py [PACKAGE_DIR ...]

A line counts as commentary when it holds a ``#`` comment (inline ones included: a comment that
shares a line with code still asks to be read) or belongs to a module, class or function
docstring found with ``ast``. ``tests/test_comment_share.py`` holds every package to 12%.
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ellm", "ellm_tools", "llm_in_the_loop", "baselines", "text_game", "text_crafter",
            "text_housekeep", "text_craftax", "lmclient")
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def commentary_lines(source: str) -> set[int]:
    """Line numbers of docstrings and of lines holding a comment."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, _DOCUMENTED) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                lines.update(range(first.lineno, first.end_lineno + 1))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines.add(token.start[0])
    return lines


def share(package_dir: Path) -> tuple[int, int]:
    """(non-blank lines, commentary lines among them) over every ``.py`` file under the dir."""
    total = commentary = 0
    for path in sorted(Path(package_dir).rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        non_blank = {n for n, line in enumerate(source.splitlines(), 1) if line.strip()}
        total += len(non_blank)
        commentary += len(commentary_lines(source) & non_blank)
    return total, commentary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path, help="default: the project's packages")
    dirs = parser.parse_args(argv).dirs or [ROOT / name for name in PACKAGES
                                            if (ROOT / name).is_dir()]
    print(f"{'package':<16} {'lines':>6} {'comment':>7} {'share':>6}")
    for path in dirs:
        lines, comments = share(path)
        print(f"{path.name:<16} {lines:>6} {comments:>7} {comments / max(lines, 1):>6.1%}")


if __name__ == "__main__":
    main()
