"""Docstrings say why in a line or two (issue 41): at most 12% of ellm/'s lines are commentary."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ellm"
MAX_RATIO = 0.12
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def commentary_lines(source: str) -> set[int]:
    """Line numbers of module, class and function docstrings and of comments."""
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


def test_commentary_lines_are_counted() -> None:
    source = '"""Module."""\n\nx = 1  # why\n\n\ndef f():\n    """Two\n    lines."""\n'
    assert commentary_lines(source) == {1, 3, 7, 8}


def test_ellm_commentary_ratio() -> None:
    commentary = total = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        non_blank = {n for n, line in enumerate(source.splitlines(), 1) if line.strip()}
        commentary += len(commentary_lines(source) & non_blank)
        total += len(non_blank)
    ratio = commentary / total
    assert ratio <= MAX_RATIO, f"docstrings and comments are {ratio:.1%} of ellm/'s lines"
