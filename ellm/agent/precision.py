"""The learner's number format (``precision``) and how host tensors reach the learner's device.

bf16 only where the hardware does it natively: emulated, it is slower than fp32.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

from ellm.errors import ConfigError

PRECISIONS = ("fp32", "bf16")
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@functools.cache
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU feature flags Linux reports (empty where there is no /proc/cpuinfo)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def bf16_support(device: torch.device) -> str | None:
    """Why ``device`` can run bf16 autocast natively (a short description), or None."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}" if torch.cuda.is_bf16_supported() else None
    found = [flag for flag in CPU_BF16_FLAGS if flag in cpu_flags()]
    return f"CPU with {', '.join(found)}" if found else None


def check_precision(precision: str, device: torch.device) -> None:
    """A ConfigError unless ``precision`` is fp32, or bf16 on hardware that supports it."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision={precision!r} is invalid: expected fp32 or bf16")
    if precision == "bf16" and bf16_support(device) is None:
        where = ("this GPU does not support bf16" if device.type == "cuda" else
                 f"this CPU has none of the flags {', '.join(CPU_BF16_FLAGS)} (AMX or "
                 "AVX512-BF16) in /proc/cpuinfo")
        raise ConfigError(f"precision=bf16 on device={device}: {where}; use precision=fp32")


def autocast(device: torch.device, precision: str,
             cache: bool = True) -> contextlib.AbstractContextManager:
    """The autocast context of ``precision``; ``cache=False`` for passes recorded as a CUDA graph.
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache)


COMPILE_STRINGS = ("reduce-overhead", "graph")
COMPILE_MODES = "true, false, reduce-overhead or graph"


def check_compile(compile: object, device: torch.device) -> None:
    """A ConfigError unless ``compile`` is valid, and graph runs on CUDA."""
    if not (isinstance(compile, bool) or compile in COMPILE_STRINGS):
        raise ConfigError(f"compile={compile!r} is invalid: expected {COMPILE_MODES}")
    if compile == "graph" and device.type != "cuda":
        raise ConfigError(f"compile=graph records the update as a CUDA graph and needs a CUDA "
                          f"device, not device={device}; use compile=true on a CPU")


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device``, pinned and non-blocking on CUDA so the host never waits."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


__all__ = ["COMPILE_MODES", "COMPILE_STRINGS", "CPU_BF16_FLAGS", "PRECISIONS", "autocast",
           "bf16_support", "check_compile", "check_precision", "cpu_flags", "to_device"]
