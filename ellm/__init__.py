"""ELLM: LLM-suggested goals as intrinsic reward for RL pretraining (Du et al., ICML 2023)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ellm")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
