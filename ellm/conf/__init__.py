"""Hydra config groups of ``train.py`` (``pkg://ellm.conf``): a package, because Hydra's
``pkg://`` reads only directories with an ``__init__.py``.
"""

from pathlib import Path

CONF_DIR = Path(__file__).parent
"""The groups' directory (``train.py --help`` lists its options without Hydra's scan)."""

GROUPS = ("agent", "method", "preset")
"""The config groups, each a directory here."""


def resumes(snapshot_path: object, finetune_snapshot: object) -> bool:
    """Whether a run continues the snapshot it names: snapshot_path without finetune_snapshot
    (which loads only the weights into a new run). Hydra's run-dir resolver passes strings."""
    if snapshot_path in (None, "", "null", "None"):
        return False
    return str(finetune_snapshot).lower() not in ("true", "1")
