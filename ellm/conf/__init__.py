"""Hydra config groups of ``train.py``, found through ``config.yaml``'s search path
(``hydra.searchpath: [pkg://ellm.conf]``): ``agent/`` (``agent=rnd``), ``preset/``
(``preset=cpu_small``) and ``hydra/launcher/`` (``hydra/launcher=ellm_local``).

A package (this file) because Hydra's ``pkg://`` source only reads a directory that has an
``__init__.py``; as package data the groups work from an installed wheel and from any working
directory.
"""

from pathlib import Path

CONF_DIR = Path(__file__).parent
"""The groups' directory (``train.py --help`` lists its options without Hydra's scan)."""
