"""The seccomp filter's BPF program, run by a small interpreter of the four instructions it
uses: every listed system call is refused, every other allowed, a foreign ABI refused or
killed; and the listed numbers match the kernel's headers where they are installed."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from llm_in_the_loop import sandbox_seccomp as seccomp

HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}


def evaluate(program: bytes, nr: int, arch: int) -> int:
    """What the filter returns for system call ``nr`` of architecture ``arch``."""
    ops = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    data, pc, acc = {0: nr, 4: arch}, 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc, pc = data[k], pc + 1
        elif code in (0x15, 0x35):  # BPF_JMP | BPF_JEQ / BPF_JGE, against k
            pc += 1 + (jt if (acc == k if code == 0x15 else acc >= k) else jf)
        else:
            assert code == 0x06  # BPF_RET | BPF_K
            return k


@pytest.mark.parametrize("arch", sorted(seccomp._DENIED))
def test_the_filter_refuses_exactly_the_listed_calls(arch):
    program = seccomp.program(arch)
    native = seccomp._AUDIT_ARCH[arch]
    denied = set(seccomp._DENIED[arch].values())
    for nr in range(600):
        expected = seccomp._RET_EPERM if nr in denied else seccomp._RET_ALLOW
        assert evaluate(program, nr, native) == expected, nr
    foreign = next(a for a in seccomp._AUDIT_ARCH.values() if a != native)
    assert evaluate(program, 0, foreign) == seccomp._RET_KILL_PROCESS
    if arch == "x86_64":  # x32 numbers alias the 64-bit ones
        assert evaluate(program, seccomp._X32_BIT | 1, native) == seccomp._RET_EPERM


@pytest.mark.parametrize("arch", sorted(seccomp._DENIED))
def test_the_numbers_are_the_kernels(arch):
    if not HEADERS[arch].exists():
        pytest.skip(f"{HEADERS[arch]} is not installed (linux-libc-dev)")
    text = HEADERS[arch].read_text()
    for name, nr in seccomp._DENIED[arch].items():
        assert re.search(rf"#define __NR_{name}\s+{nr}\b", text), (name, nr)
