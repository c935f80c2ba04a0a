"""The error of a setting that cannot work, shared with the code that configures the client."""


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key and what was expected."""
