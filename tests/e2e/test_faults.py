"""Failures that are not crashes, in a real job: a NaN in the loss (algorithm.on_nonfinite), a lost mpirun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import preflight, recipe
from launch.cli import is_open_mpi, mpiexec_command
from support.jobs import CONFIG, run_job_capturing, run_timed
from support.paths import REPO

pytestmark = pytest.mark.timeout(900)


def _config(tmp_path, sft_model, on_nonfinite):  # noqa: F811
    out = tmp_path / "run"
    overrides = {
        "model": {"path": str(sft_model)},
        "run": {"out": str(out), "steps": 5, "max_staleness": 0, "progress": False},
        "algorithm": {"on_nonfinite": on_nonfinite},
    }
    return recipe.write_config(CONFIG, out, overrides), out


def test_a_nan_loss_is_skipped_counted_and_the_run_goes_on(tmp_path, sft_model):  # noqa: F811
    cfg_path, out = _config(tmp_path, sft_model, "skip")
    done = run_job_capturing(cfg_path, {"MPIRL_INJECT_FAULT": "nan-loss:2"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == list(range(5))
    assert [m["nonfinite_skipped"] for m in metrics] == [0, 0, 1, 0, 0]
    assert "step 2: the loss (nan)" in done.stdout and "its update is skipped" in done.stdout


def test_a_nan_loss_stops_the_run_naming_rank_role_and_step(tmp_path, sft_model):  # noqa: F811
    cfg_path, out = _config(tmp_path, sft_model, "stop")
    done = run_job_capturing(cfg_path, {"MPIRL_INJECT_FAULT": "nan-loss:2"})
    text = done.stdout + done.stderr
    assert done.returncode not in (0, 2), text[-3000:]
    assert "rank 3 (trainer) failed" in text and "step 2: the loss (nan)" in text, text[-3000:]
    assert "algorithm.on_nonfinite is stop" in text
    assert len(recipe.read_metrics(out)) == 2  # steps 0 and 1; nothing was trained on the NaN


def _processes() -> dict[int, tuple[int, list[bytes]]]:
    """pid -> (parent pid, command line) of every live (not zombie) process."""
    out = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                fields = (proc / "stat").read_text().split(")")[-1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                out[int(proc.name)] = (int(fields[1]), cmdline)
    return out


def _descendants(root: int) -> set[int]:
    procs = _processes()
    family, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in family} - family
        family, grew = family | more, bool(more)
    return family - {root}


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="Linux: /proc")
@pytest.mark.parametrize("killed", ["mpirl run", "mpirun"])
def test_no_process_outlives_a_killed_launcher(tmp_path, sft_model, killed):  # noqa: F811
    """`mpirl run` starts mpiexec in a session of its own (Ctrl-C must reach only it), so a
    SIGKILL of `mpirl run` must still end mpiexec, its ranks and their reward workers; and a
    SIGKILL of mpirun its ranks."""
    out = tmp_path / "run"
    cfg_path = recipe.write_config(
        CONFIG, out, {"model": {"path": str(sft_model)}, "run": {"out": str(out), "steps": 10000, "progress": False}}
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "launch.cli", "run", str(cfg_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    family: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while not (out / "metrics.jsonl").is_file() or not (out / "metrics.jsonl").read_text().strip():
            assert launcher.poll() is None and time.monotonic() < deadline, "the job did not start training"
            time.sleep(0.5)
        family = _descendants(launcher.pid)
        procs = _processes()
        ranks = [p for p in family if str(cfg_path).encode() in procs[p][1] and b"launch" in procs[p][1]]
        assert len(ranks) >= 4, ranks  # mpiexec and the 4 ranks (and the reward rank's workers)
        if killed == "mpirl run":
            launcher.send_signal(signal.SIGKILL)
        else:
            (mpiexec,) = [p for p in family if procs[p][0] == launcher.pid]
            os.kill(mpiexec, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while family & set(_processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = family & set(_processes())
        assert not left, f"processes outlived the {killed}: {[_processes().get(p) for p in left]}"
    finally:
        for pid in family & set(_processes()):
            os.kill(pid, signal.SIGKILL)
        launcher.kill()
        launcher.wait()


def _rank_pid(root: int, rank: int) -> int:
    """The pid of MPI rank ``rank`` among ``root``'s descendants (from its environment)."""
    for pid in _descendants(root):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ranked = {f"OMPI_COMM_WORLD_RANK={rank}".encode(), f"PMI_RANK={rank}".encode()}  # Open MPI, MPICH
        if ranked & set(environ) and b"launch" in _processes().get(pid, (0, []))[1]:
            return pid
    raise LookupError(f"no rank {rank}")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="Linux: /proc")
@pytest.mark.parametrize("rank, role", [(1, "generator"), (3, "trainer"), (0, "controller")])
def test_a_stopped_rank_is_found_and_named_within_the_liveness_bound(tmp_path, sft_model, rank, role):  # noqa: F811
    out = tmp_path / "run"
    bound_s = 6.0
    cfg_path = recipe.write_config(
        CONFIG,
        out,
        {
            "model": {"path": str(sft_model)},
            "run": {"out": str(out), "steps": 10000, "progress": False, "liveness_timeout_s": bound_s},
        },
    )
    cfg = preflight.load(cfg_path)
    cmd, env = mpiexec_command(cfg.world.size, [sys.executable, "-m", "launch", str(cfg_path)])
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    family: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while not (out / "metrics.jsonl").is_file() or len((out / "metrics.jsonl").read_text().splitlines()) < 3:
            assert job.poll() is None and time.monotonic() < deadline, "the job did not start training"
            time.sleep(0.2)
        family = _descendants(job.pid)
        os.kill(_rank_pid(job.pid, rank), signal.SIGSTOP)  # alive, but silent
        stopped_at = time.monotonic()
        text = job.communicate(timeout=120)[0].decode(errors="replace")
        took = time.monotonic() - stopped_at
        assert job.returncode not in (0, 2), text[-3000:]
        assert f"rank {rank} ({role}) has sent no heartbeat" in text, text[-3000:]
        if role == "controller":  # the one who watches: the others hear its beats stop
            assert "rank 0 (controller) failed" not in text, text[-3000:]  # woken by the abort, it blames no one
        else:
            assert "rank 0 (controller) failed with TimeoutError" in text
        assert took < bound_s + 15, f"found after {took:.1f} s"  # the bound, plus the abort's own time
        deadline = time.monotonic() + 15
        while family & set(_processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not family & set(_processes()), "a process of the job was left behind"
    finally:
        for pid in family & set(_processes()):
            os.kill(pid, signal.SIGKILL)
        if job.poll() is None:
            job.kill()


# --------------------------------------------------------------- the fault matrix


ROLE_RANKS = {"controller": 0, "generator": 1, "reward": 2, "trainer": 3}  # examples/arith/async.yaml
FAULT_BOUND_S = 20  # from the fault to the job's end: MPI's abort (and a stall's 5 s), on a slow shared machine


STALL_S = 6.0  # must exceed reward.timeout_s (5 s by default): a reward rank's loop waits that long
MATRIX = [(role, kind) for kind in ("raise", "kill", "hang") for role in ROLE_RANKS]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="Linux: /proc")
@pytest.mark.parametrize(("role", "kind"), MATRIX)
def test_a_rank_that_raises_is_killed_or_deadlocks_ends_the_job_naming_rank_and_role(tmp_path, sft_model, role, kind):  # noqa: F811
    """An exception, a kill -9 or a deadlocked loop (alive, beating, still) in any role's rank
    mid-run: the job exits non-zero within the bound, its output names the rank and its role,
    and no process of it is left."""
    out = tmp_path / "run"
    run = {"out": str(out), "steps": 10000, "progress": False, "stall_timeout_s": STALL_S}
    cfg_path = recipe.write_config(CONFIG, out, {"model": {"path": str(sft_model)}, "run": run})
    cmd, env = mpiexec_command(4, [sys.executable, "-m", "launch", str(cfg_path)])
    # The 8th message a rank of the role handles: past the start, inside the training loop.
    tag = f"{os.getpid()}-{role}-{kind}"  # inherited by every process of the job, workers included
    env.update(
        {
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO),
            "MPIRL_INJECT_FAULT": f"{kind}-{role}:8",
            "MPIRL_TEST_JOB": tag,
        }
    )
    code, lines, ended_at = run_timed(cmd, env, timeout_s=300)
    text = "".join(line for _, line in lines)
    rank = ROLE_RANKS[role]
    assert code not in (0, 2), text[-3000:]
    (fault_at,) = [t for t, line in lines if "mpirl: fault injected" in line]
    took = ended_at - fault_at
    assert took < FAULT_BOUND_S, f"the job ended {took:.1f} s after the fault"
    assert "mpirl: ranks 0 controller, 1 generator, 2 reward, 3 trainer" in text, text[-3000:]
    if kind == "raise":
        assert f"rank {rank} ({role}) failed with RuntimeError" in text, text[-3000:]
    elif kind == "hang" and role == "controller":  # it watches its own loop from a thread
        assert (
            "rank 0 (controller) failed with TimeoutError: this rank is alive but its loop has made no progress" in text
        )
    elif kind == "hang":  # the controller names the rank that stands still
        assert f"rank {rank} ({role}) is alive but its loop has made no progress" in text, text[-3000:]
        assert "rank 0 (controller) failed with TimeoutError" in text
    elif is_open_mpi(cmd[0]):  # its report names the rank; the table printed at the start names its role
        assert f"rank {rank} " in text and ("signal 9" in text or "Killed" in text), text[-3000:]
    else:  # MPICH's hydra names the process (PID) and its signal
        assert "BAD TERMINATION" in text and "Killed (signal 9)" in text, text[-3000:]
    deadline = time.monotonic() + 15
    while (left := _tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes of the job were left behind: {left}"
    # However it ended, the run can be traced up to then: the rank at fault's spans are on disk.
    from launch.tools.trace import read_spans

    traced = {r["rank"]: r for r in read_spans(out)}
    assert "start.build" in [s["name"] for s in traced[rank]["spans"]], traced.keys()


def _tagged_processes(tag: str) -> list:
    """Live processes whose environment has ``MPIRL_TEST_JOB=tag``: the job's, wherever reparented."""
    procs, found = _processes(), []
    for pid, (_, cmdline) in procs.items():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"MPIRL_TEST_JOB={tag}".encode() in environ:
            found.append((pid, cmdline))
    return found
