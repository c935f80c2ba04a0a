"""Hydra config groups of ``train.py`` (``pkg://ellm.conf``): a package, because Hydra's
``pkg://`` reads only directories with an ``__init__.py``.
"""

from pathlib import Path

CONF_DIR = Path(__file__).parent
"""The groups' directory (``train.py --help`` lists its options without Hydra's scan)."""
