"""Errors shared by the core and its plug-ins (games, LM, agents); imports nothing of ellm."""


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key and what was expected."""
