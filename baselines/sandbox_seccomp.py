"""A seccomp filter for the process that runs policy code, built in Python and installed
through ``prctl`` with ctypes (no C library to install).

The filter refuses (``EPERM``) the system calls that would let code leave its call or its
sandbox: new processes and threads (``clone``, ``fork``, ``execve``), sockets, signals to other
processes, tracing other processes, mounting, namespaces, kernel keys, BPF, ``io_uring`` (whose
operations would bypass this filter) and the like. Everything else is allowed: the namespaces
around the process (:mod:`baselines.sandbox_bwrap`) decide what those calls can reach.
A system call of another architecture's ABI (i386 or x32 on x86_64) kills the process, since
its numbers differ from the ones checked here.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from typing import Final

# System call numbers: linux/arch/x86/entry/syscalls/syscall_64.tbl and the generic table
# (include/uapi/asm-generic/unistd.h) that aarch64 uses. No fork, vfork, creat, mknod there.
_DENIED: Final = {
    "x86_64": {
        "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "socketpair": 53,
        "accept4": 288, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
        "clone3": 435, "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "kcmp": 312, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "unshare": 272, "setns": 308, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248,
        "request_key": 249, "name_to_handle_at": 303, "open_by_handle_at": 304,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
        "mknod": 133, "mknodat": 259, "quotactl": 179, "creat": 85, "personality": 135,
        "syslog": 103, "sethostname": 170, "setdomainname": 171, "vhangup": 153,
    },
    "aarch64": {
        "socket": 198, "connect": 203, "accept": 202, "bind": 200, "listen": 201,
        "socketpair": 199, "accept4": 242, "clone": 220, "execve": 221, "execveat": 281,
        "clone3": 435, "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "kcmp": 272, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "unshare": 97, "setns": 268, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219, "add_key": 217,
        "request_key": 218, "name_to_handle_at": 264, "open_by_handle_at": 265,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
        "mknodat": 33, "quotactl": 60, "personality": 92, "syslog": 116, "sethostname": 161,
        "setdomainname": 162, "vhangup": 58,
    },
}
_AUDIT_ARCH: Final = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT: Final = 0x40000000  # x32 system calls on x86_64 carry this bit in their number

# Classic BPF (linux/filter.h, linux/seccomp.h).
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_KILL_PROCESS, _RET_ALLOW = 0x80000000, 0x7FFF0000
_RET_EPERM: Final = 0x00050000 | errno.EPERM
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def architecture() -> str | None:
    """This machine's architecture if the filter knows its system calls, else None."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if platform.system() == "Linux" and machine in _DENIED else None


def _search(denied: list[int]) -> list[tuple[int, int, int, int]]:
    """A binary search over the sorted ``denied`` numbers: a few tests per system call (the
    kernel runs the filter on each call number once when it is installed, once per fork)."""
    if len(denied) <= 4:
        ops = [op for nr in denied for op in ((_JEQ_K, 0, 1, nr), (_RET_K, 0, 0, _RET_EPERM))]
        return [*ops, (_RET_K, 0, 0, _RET_ALLOW)]
    middle = len(denied) // 2
    below, above = _search(denied[:middle]), _search(denied[middle:])
    assert len(below) < 256  # a jump's offset is one byte
    return [(_JGE_K, len(below), 0, denied[middle]), *below, *above]


def program(arch: str) -> bytes:
    """The filter as an array of ``struct sock_filter`` (code u16, jt u8, jf u8, k u32)."""
    ops: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 1, 0, _AUDIT_ARCH[arch]),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch == "x86_64":
        ops += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, _RET_EPERM)]
    ops += _search(sorted(set(_DENIED[arch].values())))
    return b"".join(struct.pack("=HBBI", *op) for op in ops)


class Filter:
    """The filter, built ahead: ``install`` runs in each freshly forked child, just before the
    policy code, and must be quick."""

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
        """Refuse the system calls above in this process and all it could start; OSError if
        the kernel refuses the filter."""
        for option, arg, pointer in ((_PR_SET_NO_NEW_PRIVS, 1, None),
                                     (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._fprog)):
            if self._prctl(option, arg, pointer, 0, 0) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"prctl({option}) refused: {errno.errorcode.get(code)}")
