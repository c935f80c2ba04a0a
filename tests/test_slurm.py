"""``hydra/launcher=submitit_slurm`` against a real SLURM: a one-node cluster (munged, slurmctld,
slurmd) started on this machine from its own slurm.conf in a temporary directory, a 2-seed sweep
through it, and the report of both runs. Debian's packages are installed where missing (root)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TINY, csv_rows, run_entry, run_train

DEBS = ("slurmctld", "slurmd", "slurm-client", "munge")
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "squeue", "scancel")
PARTITION = "ellm"
# The daemons are in sbin, which a non-login root shell may not have on its PATH.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


@dataclass(frozen=True)
class Cluster:
    conf: Path
    env: dict[str, str]  # SLURM_CONF for the client commands (sbatch, sinfo, ...)

    def run(self, *command: str) -> str:
        return subprocess.run(command, env=self.env, capture_output=True, text=True,
                              timeout=30, check=True).stdout


def _missing() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p, path=SEARCH_PATH) is None]


def _install_or_skip() -> None:
    """apt-get the Debian packages where a program is missing; skip, saying why, where that is
    not possible."""
    missing = _missing()
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"SLURM is not installed (no {', '.join(missing)}) and this user cannot "
                    f"install it (needs root and apt-get: apt-get install {' '.join(DEBS)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=120", *DEBS]
    proc = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:  # a fresh machine may have no package lists yet
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
        proc = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or _missing():
        pytest.skip(f"apt-get install {' '.join(DEBS)} failed ({proc.returncode}, still "
                    f"missing {_missing()}):\n{proc.stderr[-1500:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_conf(d: Path) -> Path:
    """slurm.conf for one node, this host as `slurmd -C` sees it, everything under ``d``; no
    cgroups (a container may not delegate them) and no accounting database."""
    host = socket.gethostname().split(".")[0]
    node = subprocess.run([shutil.which("slurmd", path=SEARCH_PATH), "-C"], capture_output=True,
                          text=True, check=True).stdout.splitlines()[0]
    assert node.startswith(f"NodeName={host} "), node
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    conf = d / "slurm.conf"
    conf.write_text(f"""\
ClusterName=ellmtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d / "munge.socket"}
StateSaveLocation={d / "state"}
SlurmdSpoolDir={d / "spool"}
SlurmctldPidFile={d / "slurmctld.pid"}
SlurmdPidFile={d / "slurmd.pid"}
SlurmctldLogFile={d / "slurmctld.log"}
SlurmdLogFile={d / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MpiDefault=none
ReturnToService=2
{node} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    return conf


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):  # slurmd, slurmctld, then munged
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A one-node SLURM cluster of the test's own daemons, run in the foreground as children of
    pytest; its jobs are cancelled and the daemons stopped after the session, also on failure."""
    if os.geteuid() != 0:
        pytest.skip("starting slurmd (which runs jobs as their user) needs root")
    _install_or_skip()
    d = tmp_path_factory.mktemp("slurm")
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = _write_conf(d)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = Cluster(conf, env)
    procs: list[subprocess.Popen[bytes]] = []
    started = False

    def start(*command: str) -> None:
        with (d / f"{command[0]}.out").open("wb") as log:
            procs.append(subprocess.Popen([shutil.which(command[0], path=SEARCH_PATH),
                                           *command[1:]], env=env, stdout=log, stderr=log))

    try:
        # -f: munged wants its socket's directory open to all users; this one is private.
        start("munged", "-F", "-f", f"--key-file={key}", f"--socket={d / 'munge.socket'}",
              f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
              f"--seed-file={d / 'munged.seed'}")
        _wait_for(lambda: (d / "munge.socket").exists(), 10, "munged's socket", d)
        start("slurmctld", "-D")
        start("slurmd", "-D")
        _wait_for(lambda: cluster.run("sinfo", "-h", "-o", "%T").strip() == "idle", 60,
                  "the node to be idle", d)
        started = True
        yield cluster
    finally:
        try:
            if started:
                subprocess.run(["scancel", f"--partition={PARTITION}"], env=env,
                               capture_output=True, timeout=30, check=False)
                _wait_for(lambda: not cluster.run("squeue", "-h").strip(), 30,
                          "the cancelled jobs to end", d)
        finally:
            _stop(procs)


def _wait_for(ready: Callable[[], bool], seconds: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except subprocess.CalledProcessError:
            pass  # slurmctld not listening yet
        time.sleep(0.5)
    tails = {p.name: p.read_text(errors="replace")[-1500:] for p in sorted(logs.glob("*.log"))}
    raise AssertionError(f"timed out waiting for {what} after {seconds} s; logs:\n"
                         + "\n".join(f"--- {n}\n{t}" for n, t in tails.items()))


@pytest.mark.e2e
def test_two_seed_sweep_on_a_real_slurm_cluster(slurm, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="needs the slurm extra: pip install -e '.[slurm]'")
    launcher = [f"hydra.launcher.partition={PARTITION}", "hydra.launcher.cpus_per_task=1",
                "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10"]
    try:
        run_train(tmp_path, "-m", "hydra/launcher=submitit_slurm", *launcher, "seed=1,2",
                  *TINY, "exp_name=SLURM", timeout=300, extra_env={"SLURM_CONF": str(slurm.conf)})
    except (AssertionError, subprocess.TimeoutExpired) as e:
        logs = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(tmp_path.glob("exp_local/*/*/.submitit/*/*.err")))
        raise AssertionError(f"{e}\njobs' stderr:\n{logs}") from e
    (sweep,) = tmp_path.glob("exp_local/*/SLURM_*")
    submitted = sorted(sweep.glob(".submitit/*/*_submission.sh"))
    assert len(submitted) == 1  # one sbatch array of two tasks
    script = submitted[0].read_text()
    assert f"#SBATCH --partition={PARTITION}" in script and "#SBATCH --array=0-1" in script
    assert "srun --unbuffered" in script and f"{sys.executable} -u -m submitit" in script
    jobs = sorted(p for p in sweep.iterdir() if p.name.endswith(("seed1", "seed2")))
    assert [p.name for p in jobs] == ["0_seed1", "1_seed2"]
    for seed, job in enumerate(jobs, start=1):
        assert json.loads((job / "config.json").read_text())["seed"] == seed
        assert [int(r["frame"]) for r in csv_rows(job / "eval.csv")] == [0, 120, 240]
    # SLURM ran both tasks of the array to completion (slurmctld keeps finished jobs a while;
    # a task's result is written before its step ends).
    array_id = submitted[0].parent.name

    def states() -> list[str]:
        fields = slurm.run("scontrol", "-o", "show", "job", array_id).split()
        return [f for f in fields if f.startswith(("JobState=", "ExitCode="))]

    _wait_for(lambda: not {"JobState=RUNNING", "JobState=COMPLETING"} & set(states()), 60,
              f"job {array_id} to end", slurm.conf.parent)
    assert states() == ["JobState=COMPLETED", "ExitCode=0:0"] * 2
    proc = run_entry("ellm_tools.report", tmp_path, str(sweep))
    assert "2 runs (2 with data)" in proc.stdout, proc.stdout
    (score,) = json.loads((sweep / "report" / "report.json").read_text())["scores"]
    assert sorted(score["seeds"]) == [1, 2]
