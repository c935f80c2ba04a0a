"""A deny-by-default seccomp filter for the process that runs policy code, built in Python and
installed through ``prctl`` with ctypes (no C library to install); docs/optimizers.md, "The
sandbox", says what it refuses, and ``tests/test_sandbox_seccomp.py`` how the list was read.

A system call of another architecture's ABI (i386 on x86_64) kills the process; an x32 one is
refused.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from typing import Final

# Allowed system calls: (x86_64, aarch64) numbers, from linux/arch/x86/entry/syscalls/
# syscall_64.tbl and the generic table (include/uapi/asm-generic/unistd.h) that aarch64 uses.
_CALLS: Final = {
    "read": (0, 63), "write": (1, 64), "readv": (19, 65), "writev": (20, 66),
    "close": (3, 57), "lseek": (8, 62), "fstat": (5, 80), "newfstatat": (262, 79),
    "mmap": (9, 222), "mprotect": (10, 226), "munmap": (11, 215), "mremap": (25, 216),
    "brk": (12, 214), "madvise": (28, 233), "futex": (202, 98), "getrandom": (318, 278),
    "rt_sigaction": (13, 134), "rt_sigprocmask": (14, 135), "rt_sigreturn": (15, 139),
    "sigaltstack": (131, 132), "sched_yield": (24, 124), "nanosleep": (35, 101),
    "clock_nanosleep": (230, 115), "clock_gettime": (228, 113), "clock_getres": (229, 114),
    "gettimeofday": (96, 169), "getpid": (39, 172), "gettid": (186, 178), "getuid": (102, 174),
    "geteuid": (107, 175), "getgid": (104, 176), "getegid": (108, 177), "exit": (60, 93),
    "exit_group": (231, 94),
}
# Allowed only with these arguments: {name: (numbers, ((argument index, value), ...))}.
_GUARDED: Final = {
    "ioctl": ((16, 29), ((1, 0x5401),)),  # TCGETS: is this descriptor a terminal?
    "prlimit64": ((302, 261), ((0, 0), (2, 0))),  # pid 0 (itself), no new limit: a read
}
_ARCHS: Final = ("x86_64", "aarch64")
_ALLOWED: Final = {arch: {name: nrs[i] for name, nrs in _CALLS.items()}
                   for i, arch in enumerate(_ARCHS)}
_CONDITIONS: Final = {arch: {name: (nrs[i], args) for name, (nrs, args) in _GUARDED.items()}
                      for i, arch in enumerate(_ARCHS)}
_AUDIT_ARCH: Final = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT: Final = 0x40000000  # x32 system calls on x86_64 carry this bit in their number

# Classic BPF (linux/filter.h, linux/seccomp.h).
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_KILL_PROCESS, _RET_ALLOW = 0x80000000, 0x7FFF0000
_RET_EPERM: Final = 0x00050000 | errno.EPERM
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_ARGS_OFFSET: Final = 16  # seccomp_data.args[0]: u64 each, little-endian on both archs
Op = tuple[int, int | str, int | str, int]  # code, jump if true, jump if false (or labels), k


def architecture() -> str | None:
    """This machine's architecture if the filter knows its system calls, else None."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if platform.system() == "Linux" and machine in _ALLOWED else None


def _argument_is(index: int, value: int, deny: str) -> list[Op]:
    """Go on if argument ``index`` (both 32-bit halves) equals ``value``, else to ``deny``."""
    offset = _ARGS_OFFSET + 8 * index
    return [(_LD_W_ABS, 0, 0, offset), (_JEQ_K, 0, deny, value & 0xFFFFFFFF),
            (_LD_W_ABS, 0, 0, offset + 4), (_JEQ_K, 0, deny, value >> 32)]


def _assemble(ops: list[Op | str]) -> list[tuple[int, int, int, int]]:
    where, at = {}, 0
    for op in ops:
        if isinstance(op, str):
            where[op] = at
        else:
            at += 1
    out: list[tuple[int, int, int, int]] = []
    for op in ops:
        if isinstance(op, str):
            continue
        code, jt, jf, k = op
        here = len(out) + 1
        jt = where[jt] - here if isinstance(jt, str) else jt
        jf = where[jf] - here if isinstance(jf, str) else jf
        assert 0 <= jt < 256 and 0 <= jf < 256, "a jump's offset is one byte"
        out.append((code, jt, jf, k))
    return out


def program(arch: str) -> bytes:
    """The filter as an array of ``struct sock_filter`` (code u16, jt u8, jf u8, k u32)."""
    ops: list[Op | str] = [
        (_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 1, 0, _AUDIT_ARCH[arch]),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch == "x86_64":
        ops += [(_JGE_K, "deny", 0, _X32_BIT)]
    for nr in sorted(set(_ALLOWED[arch].values())):
        ops.append((_JEQ_K, "allow", 0, nr))
    for name, (nr, conditions) in _CONDITIONS[arch].items():
        ops.append((_JEQ_K, 0, f"not {name}", nr))
        for index, value in conditions:
            ops += _argument_is(index, value, "deny")
        ops += [(_RET_K, 0, 0, _RET_ALLOW), f"not {name}"]
    ops += ["deny", (_RET_K, 0, 0, _RET_EPERM), "allow", (_RET_K, 0, 0, _RET_ALLOW)]
    return b"".join(struct.pack("=HBBI", *op) for op in _assemble(ops))


class Filter:
    """The filter, built ahead: ``install`` runs in each forked child and must be quick."""

    def __init__(self, arch: str) -> None:
        code = program(arch)
        self._code = ctypes.create_string_buffer(code, len(code))
        # struct sock_fprog { unsigned short len; struct sock_filter *filter; }
        fprog = struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(self._code))
        self._fprog = ctypes.create_string_buffer(fprog, len(fprog))
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        self._prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                                ctypes.c_ulong]

    def install(self) -> None:
        """Refuse the system calls above here; OSError if the kernel refuses the filter."""
        for option, arg, pointer in ((_PR_SET_NO_NEW_PRIVS, 1, None),
                                     (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._fprog)):
            if self._prctl(option, arg, pointer, 0, 0) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"prctl({option}) refused: {errno.errorcode.get(code)}")
