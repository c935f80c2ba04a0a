"""Hydra config groups of ``train.py`` (``pkg://ellm.conf``): a package, because Hydra's
``pkg://`` reads only directories with an ``__init__.py``.
"""

from pathlib import Path

CONF_DIR = Path(__file__).parent
"""The groups' directory (``train.py --help`` lists its options without Hydra's scan)."""

GROUPS = ("method", "agent", "preset")
"""The config groups: ``method/`` is ``ellm/method/`` (beside its registry), the rest are here."""


def group_dir(group: str) -> Path:
    return CONF_DIR.parent / "method" if group == "method" else CONF_DIR / group


def resumes(snapshot_path: object, finetune_snapshot: object) -> bool:
    """Whether a run continues the snapshot it names: snapshot_path without finetune_snapshot
    (which loads only the weights into a new run). Hydra's run-dir resolver passes strings."""
    if snapshot_path in (None, "", "null", "None"):
        return False
    return str(finetune_snapshot).lower() not in ("true", "1")
