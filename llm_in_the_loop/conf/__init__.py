"""The entry points' configs (``llf.yaml``, ``policy_search.yaml``, ``code_policy.yaml``), in a
folder of their own: Hydra reads every folder beside a config as a group, so beside the code the
``sandbox/`` package would take ``sandbox=none`` for a group and refuse it."""

from pathlib import Path

CONF_DIR = Path(__file__).parent
"""The folder Hydra composes the entry points' configs from."""
