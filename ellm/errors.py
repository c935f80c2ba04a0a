"""Errors shared by the core and its plug-ins (games, LM, agents); imports nothing of ellm."""

# The LM client's own: an unusable answer cache stops a run at its config check as a bad key does.
from lmclient.errors import ConfigError

__all__ = ["ConfigError"]
