"""The seccomp filter's BPF program, run by a small interpreter of the instructions it uses:
deny by default (only the listed system calls are allowed, two of them only with safe
arguments; every other number, known or not, is refused), a foreign ABI refused or killed; and
the listed numbers match the kernel's headers where they are installed.

The allowed list was read off ``strace -f -o trace.txt python workload.py``, a script that runs
policy code exercising numpy and the standard library through ``Sandbox(isolation="none")``:
the system calls of the worker's children after their ``prctl(PR_SET_PDEATHSIG)``."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from llm_in_the_loop.code_policy.sandbox import seccomp

HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}
# Calls the hostile candidates used, by x86_64 number: System V IPC, shared memory,
# another process's priority, scheduler and limits, files, processes, sockets.
HOSTILE = {"shmget": 29, "shmat": 30, "semget": 64, "msgget": 68, "memfd_create": 319,
           "setpriority": 141, "sched_setscheduler": 144, "sched_setaffinity": 203,
           "sched_setattr": 314, "setrlimit": 160, "openat": 257, "open": 2, "clone": 56,
           "clone3": 435, "socket": 41, "kill": 62, "ptrace": 101, "io_uring_setup": 425,
           "process_madvise": 440, "mbind": 237, "ioprio_set": 251}


def evaluate(program: bytes, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """What the filter returns for system call ``nr`` of architecture ``arch`` with ``args``."""
    ops = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    data = {0: nr, 4: arch}
    for i, value in enumerate(args):
        data[16 + 8 * i], data[20 + 8 * i] = value & 0xFFFFFFFF, value >> 32
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc, pc = data[k], pc + 1
        elif code in (0x15, 0x35):  # BPF_JMP | BPF_JEQ / BPF_JGE, against k
            pc += 1 + (jt if (acc == k if code == 0x15 else acc >= k) else jf)
        else:
            assert code == 0x06  # BPF_RET | BPF_K
            return k


@pytest.mark.parametrize("arch", sorted(seccomp._ALLOWED))
def test_the_filter_allows_exactly_the_listed_calls(arch):
    program = seccomp.program(arch)
    native = seccomp._AUDIT_ARCH[arch]
    allowed = set(seccomp._ALLOWED[arch].values())
    guarded = {nr for nr, _ in seccomp._CONDITIONS[arch].values()}
    # Every number up to far past the kernel's newest, and some that no kernel has.
    for nr in [*range(1100), 0x3FFFFFFF, 0xFFFFFFFF]:
        expected = seccomp._RET_ALLOW if nr in allowed else seccomp._RET_EPERM
        if nr not in guarded:
            assert evaluate(program, nr, native) == expected, nr
    foreign = next(a for a in seccomp._AUDIT_ARCH.values() if a != native)
    assert evaluate(program, 0, foreign) == seccomp._RET_KILL_PROCESS
    if arch == "x86_64":  # x32 numbers alias the 64-bit ones
        assert evaluate(program, seccomp._X32_BIT | 1, native) == seccomp._RET_EPERM
        for name, nr in HOSTILE.items():
            assert evaluate(program, nr, native) == seccomp._RET_EPERM, name


@pytest.mark.parametrize("arch", sorted(seccomp._ALLOWED))
def test_guarded_calls_pass_only_with_their_safe_arguments(arch):
    program = seccomp.program(arch)
    native = seccomp._AUDIT_ARCH[arch]
    ioctl, _ = seccomp._CONDITIONS[arch]["ioctl"]
    prlimit, _ = seccomp._CONDITIONS[arch]["prlimit64"]
    tcgets, tiocsti = 0x5401, 0x5412
    assert evaluate(program, ioctl, native, (1, tcgets, 0, 0, 0, 0)) == seccomp._RET_ALLOW
    assert evaluate(program, ioctl, native, (1, tiocsti, 0, 0, 0, 0)) == seccomp._RET_EPERM
    assert evaluate(program, ioctl, native, (1, tcgets | 1 << 32, 0, 0, 0, 0)) == \
        seccomp._RET_EPERM
    read_own = (0, 9, 0, 0x7FFF0000, 0, 0)  # prlimit64(0, RLIMIT_AS, NULL, &old)
    assert evaluate(program, prlimit, native, read_own) == seccomp._RET_ALLOW
    assert evaluate(program, prlimit, native, (1, 9, 0, 0x7FFF0000, 0, 0)) == \
        seccomp._RET_EPERM  # another process (the supervisor is pid 1 or 2 in the sandbox)
    assert evaluate(program, prlimit, native, (0, 9, 0x7FFF0000, 0, 0, 0)) == \
        seccomp._RET_EPERM  # setting a limit


@pytest.mark.parametrize("arch", sorted(seccomp._ALLOWED))
def test_the_numbers_are_the_kernels(arch):
    if not HEADERS[arch].exists():
        pytest.skip(f"{HEADERS[arch]} is not installed (linux-libc-dev)")
    text = HEADERS[arch].read_text()
    named = {**seccomp._ALLOWED[arch],
             **{name: nr for name, (nr, _) in seccomp._CONDITIONS[arch].items()}}
    if arch == "x86_64":
        named.update(HOSTILE)
    generic = {"newfstatat": "fstatat"}  # the generic table's 32/64-bit names (__NR3264_*)
    for name, nr in named.items():
        assert re.search(rf"#define __NR_{name}\s+{nr}\b", text) or re.search(
            rf"#define __NR3264_{generic.get(name, name)}\s+{nr}\b", text), (name, nr)
