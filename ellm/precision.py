"""The learner's number format (``precision``), where bf16 autocast is supported, and how host
tensors reach the learner's device (:func:`to_device`).

``precision=bf16`` runs the DQN update's forward and backward passes under
:func:`torch.autocast` with bfloat16; the TD target, the loss, the optimiser and the weights stay
fp32, and so do acting and the intrinsic-reward modules. It is accepted only where the hardware
does bf16 matrix work natively: a CUDA GPU that supports it, or a CPU with AMX or AVX512-BF16
(elsewhere autocast would emulate bf16 and be slower than fp32).
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

from ellm.errors import ConfigError

PRECISIONS = ("fp32", "bf16")
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of native bf16 matrix work


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
    """The autocast context of ``precision`` on ``device`` (a no-op context for fp32);
    ``cache=False`` for passes recorded as a CUDA graph, which cannot hold autocast's cache."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache)


COMPILE_STRINGS = ("reduce-overhead", "graph")  # compile's values besides true and false
COMPILE_MODES = "true, false, reduce-overhead or graph"


def check_compile(compile: object, device: torch.device) -> None:
    """``compile`` is true, false, reduce-overhead or graph, and graph (a CUDA graph of the
    whole step) runs on a CUDA device; else a ConfigError naming the key."""
    if not (isinstance(compile, bool) or compile in COMPILE_STRINGS):
        raise ConfigError(f"compile={compile!r} is invalid: expected {COMPILE_MODES}")
    if compile == "graph" and device.type != "cuda":
        raise ConfigError(f"compile=graph records the update as a CUDA graph and needs a CUDA "
                          f"device, not device={device}; use compile=true on a CPU")


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device``: on CUDA through pinned memory with a non-blocking copy, so
    the host never waits for the device; elsewhere a plain ``.to``."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


__all__ = ["COMPILE_MODES", "COMPILE_STRINGS", "CPU_BF16_FLAGS", "PRECISIONS", "autocast",
           "bf16_support", "check_compile", "check_precision", "cpu_flags", "to_device"]
