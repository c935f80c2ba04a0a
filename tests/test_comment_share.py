"""Comments and docstrings say why in a line or two (issue 59): at most 12% of every package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("comment_share",
                                               ROOT / "scripts" / "comment_share.py")
comment_share = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(comment_share)

MAX_SHARE = 0.12
# Still being moved by their owners; the test fails once one is under the cap, to drop it here.
PENDING: set[str] = set()
PACKAGES = [name for name in comment_share.PACKAGES if (ROOT / name).is_dir()]

SAMPLE = '''"""Module docstring
on two lines."""

import os  # an inline comment counts


# a whole-line comment
x = os.sep


class A:
    """Class docstring."""

    def f(self):
        """Function docstring."""
        s = """a string, not a docstring"""
        return s
'''


def test_counter_on_a_hand_written_module(tmp_path: Path) -> None:
    assert comment_share.commentary_lines(SAMPLE) == {1, 2, 4, 7, 12, 15}
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text(SAMPLE)
    (tmp_path / "sub" / "b.py").write_text("y = 2\n\n# one\n")
    (tmp_path / "notes.txt").write_text("# not Python\n")
    assert comment_share.share(tmp_path) == (11 + 2, 6 + 1)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_comment_share(package: str) -> None:
    lines, comments = comment_share.share(ROOT / package)
    share = comments / lines
    if package in PENDING:
        assert share > MAX_SHARE, f"{package} is at {share:.1%}: drop it from PENDING"
    else:
        assert share <= MAX_SHARE, f"comments and docstrings are {share:.1%} of {package}/"
