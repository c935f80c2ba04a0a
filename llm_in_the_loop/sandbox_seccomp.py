"""A seccomp filter for the process that runs policy code, built in Python and installed
through ``prctl`` with ctypes (no C library to install).

The filter refuses (``EPERM``) the system calls that would let code leave its call or its
sandbox: new processes and threads (``clone``, ``fork``, ``execve``), sockets, signals to other
processes, tracing other processes, mounting, namespaces, kernel keys, BPF, ``io_uring`` (whose
operations would bypass this filter) and the like. Everything else is allowed: the namespaces
around the process (:mod:`llm_in_the_loop.sandbox_bwrap`) decide what those calls can reach.
A system call of another architecture's ABI (i386 or x32 on x86_64) kills the process, since
its numbers differ from the ones checked here.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from typing import Final

# Refused system calls: (x86_64, aarch64) numbers, from linux/arch/x86/entry/syscalls/
# syscall_64.tbl and the generic table (include/uapi/asm-generic/unistd.h) that aarch64 uses,
# which has no fork, vfork, creat or mknod.
_CALLS: Final = {
    "socket": (41, 198), "connect": (42, 203), "accept": (43, 202), "bind": (49, 200),
    "listen": (50, 201), "socketpair": (53, 199), "accept4": (288, 242), "clone": (56, 220),
    "fork": (57, None), "vfork": (58, None), "execve": (59, 221), "execveat": (322, 281),
    "clone3": (435, 435), "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240), "pidfd_open": (434, 434),
    "pidfd_send_signal": (424, 424), "pidfd_getfd": (438, 438), "ptrace": (101, 117),
    "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "kcmp": (312, 272),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "unshare": (272, 97), "setns": (308, 268), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "bpf": (321, 280), "perf_event_open": (298, 241),
    "userfaultfd": (323, 282), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "mknod": (133, None),
    "mknodat": (259, 33), "quotactl": (179, 60), "creat": (85, None), "personality": (135, 92),
    "syslog": (103, 116), "sethostname": (170, 161), "setdomainname": (171, 162),
    "vhangup": (153, 58),
}
_ARCHS: Final = ("x86_64", "aarch64")
_DENIED: Final = {arch: {name: nrs[i] for name, nrs in _CALLS.items() if nrs[i] is not None}
                  for i, arch in enumerate(_ARCHS)}
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
