"""A real Slurm on the virtual cluster: the batch scripts of examples/slurm submitted with
sbatch, a plain run and a preempted one that checkpoints, is requeued and finishes.

    make test-hpc        # root, network namespaces and Debian's Slurm (tests/hpc/install-slurm.sh)

Everything is bounded in time; the daemons, the jobs and the namespaces are gone afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import recipe
from support.cluster import VirtualCluster, unavailable_reason
from support.jobs import CONFIG
from support.slurm import Slurm, slurm_unavailable_reason

REPO = Path(__file__).resolve().parents[2]
REASON = unavailable_reason() or slurm_unavailable_reason()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=f"Slurm test cluster: {REASON}"), pytest.mark.timeout(900)]

# The example scripts ask for 4 GPU nodes; sbatch's own options override their #SBATCH lines.
SMALL = ["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=0", "--time=20"]


@pytest.fixture
def slurm(tmp_path):
    with VirtualCluster(2) as cluster:
        s = Slurm(cluster, tmp_path / "slurm")
        try:
            yield s
        finally:
            squeue = s.run(["squeue", "-h", "-o", "%i"]).stdout.split()
            for job in squeue:
                s.run(["scancel", job])
            s.close()
    daemons = subprocess.run(["pgrep", "-f", str(tmp_path / "slurm")], capture_output=True, text=True).stdout.split()
    assert not daemons, f"Slurm daemons outlived the test: {daemons}"


def job_env(slurm: Slurm, extra: dict) -> dict:
    """What the submitting shell has: the venv first on PATH (its python, mpirl), the repo importable."""
    venv_bin = str(Path(sys.executable).parent)
    return slurm.env(
        {
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(REPO),
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            **extra,
        }
    )


def test_srun_and_mpirun_both_start_the_wheels_ranks_on_both_nodes(slurm, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import socket\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\n"
        "hosts = c.allgather(socket.gethostname())\n"
        "if c.Get_rank() == 0: print('HOSTS', sorted(hosts), flush=True)\n"
    )
    out = tmp_path / "probe.out"
    script = (
        f"echo SRUN; srun python {probe}\n"
        f"echo MPIRUN; mpirun --bind-to none --mca btl self,tcp python {probe}\n"  # prted started through srun
    )
    job = slurm.sbatch(
        ["--nodes=2", "--ntasks-per-node=2", f"--output={out}", "--wrap", script], env=job_env(slurm, {})
    )
    info = slurm.wait(job, timeout_s=180)
    text = out.read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", text[-3000:]
    hosts = "HOSTS ['vnode0', 'vnode0', 'vnode1', 'vnode1']"
    assert text.count(hosts) == 2 and text.index("SRUN") < text.index(hosts) < text.index("MPIRUN"), text


def small_config(tmp_path, sft_model, **run) -> tuple[Path, Path]:  # noqa: F811
    out = tmp_path / "run"
    overrides = {"model": {"path": str(sft_model)}, "run": {"out": str(out), "progress": False, **run}}
    return recipe.write_config(CONFIG, out, overrides), out


def test_the_example_batch_script_runs_a_job_across_two_nodes(slurm, tmp_path, sft_model):  # noqa: F811
    cfg, out = small_config(tmp_path, sft_model, steps=4)
    log = tmp_path / "job.out"
    job = slurm.sbatch(
        [*SMALL, f"--output={log}", str(REPO / "examples/slurm/math-7b.sbatch")],
        env=job_env(slurm, {"CONFIG": str(cfg)}),
    )
    info = slurm.wait(job, timeout_s=600)
    text = log.read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", text[-4000:]
    assert "mpirl: nodes vnode0: 0-1 controller, generator; vnode1: 2-3 reward, trainer" in text, text[-3000:]
    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]
    assert (out / "policy" / "config.json").is_file()


def test_a_preempted_job_checkpoints_is_requeued_and_finishes(slurm, tmp_path, sft_model):  # noqa: F811
    """The resumable script under a real Slurm: a signal to every task (what --signal and a
    preemption deliver), the checkpoint, exit 75, `scontrol requeue`, `run.resume: auto`."""
    steps = 30
    cfg, out = small_config(tmp_path, sft_model, steps=steps, resume="auto")
    log = tmp_path / "job.out"
    job = slurm.sbatch(
        [*SMALL, f"--output={log}", str(REPO / "examples/slurm/resumable.sbatch")],
        env=job_env(slurm, {"CONFIG": str(cfg)}),
    )
    metrics_file = out / "metrics.jsonl"
    deadline = time.monotonic() + 400
    while not (metrics_file.is_file() and len(metrics_file.read_text().splitlines()) >= 3):
        info = slurm.job(job)
        assert info.get("JobState") in ("PENDING", "RUNNING", "CONFIGURING"), (info, log.read_text()[-3000:])
        assert time.monotonic() < deadline, "the job did not start training"
        time.sleep(1)
    # Every task of the job's steps, as Slurm signals them at --signal's time or on preemption.
    assert slurm.run(["scancel", "--signal=USR1", str(job)]).returncode == 0
    info = slurm.wait(job, timeout_s=600, until=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"))
    text = log.read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, text[-4000:])
    assert int(info["Restarts"]) == 1, info
    assert f"mpirl: checkpointed on a signal; requeueing job {job}" in text
    assert "mpirl: resuming from" in text, text[-3000:]
    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == list(range(steps))  # each step once, none missing
