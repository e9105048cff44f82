"""Whole jobs for the end-to-end tests: the arith demo's role map, the time bound a hang hits,
and ways to run a job capturing its output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from launch import preflight
from launch.cli import mpiexec_command
from support.paths import REPO

CONFIG = REPO / "examples/arith/async.yaml"
# Bounds that a hang hits but a slow, shared 2-core machine does not: each job starts 4-6
# ranks that import torch and transformers before the first step.
JOB_TIMEOUT_S = 600


def run_job_capturing(cfg_path: Path, env_extra: dict) -> subprocess.CompletedProcess:
    """The job under mpiexec with stdout a pipe (not a terminal), as in a Slurm log."""
    cfg = preflight.load(cfg_path)
    cmd, env = mpiexec_command(cfg.world.size, [sys.executable, "-m", "launch", str(cfg_path)])
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **env_extra})
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)


def run_timed(cmd, env, timeout_s: float) -> tuple[int, list[tuple[float, str]], float]:
    """Run ``cmd``: its exit code, every output line with the monotonic time it arrived, and the
    time it ended (a job still running at ``timeout_s`` is killed: its code is then -9)."""
    import threading

    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[tuple[float, str]] = []

    def read():
        for raw in job.stdout:
            lines.append((time.monotonic(), raw.decode(errors="replace")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        job.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        ended_at = time.monotonic()
        if job.poll() is None:
            job.kill()
            job.wait()
        reader.join(timeout=10)
    return job.returncode, lines, ended_at


def kill_after_checkpoint(config: Path, run_dir: Path, steps_done: int) -> None:
    """Start the job and SIGKILL all of it once the checkpoint after ``steps_done`` steps is complete."""
    cfg = preflight.load(config)
    cmd, env = mpiexec_command(cfg.world.size, [sys.executable, "-m", "launch", str(config)])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO)])  # plug-ins from tests/support too
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    want = run_dir / "checkpoints" / f"step-{steps_done:08d}" / "COMPLETE"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        while not want.exists():
            assert proc.poll() is None, "the job ended before its checkpoint"
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
