"""Failure semantics under a real mpirun: an exception on one rank ends the whole job, non-zero,
within seconds, naming its rank and role; an MPI test that hangs ends the job too."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from support.mpi_helpers import REPO, run_mpi, run_python

ABORT_WITHIN_S = 10.0

# Rank 2 ("generator") raises once every other rank is blocked waiting for a message that
# will never come: ranks 0 and 1 in a blocking MPI receive (inside the MPI library, where
# no Python signal handler runs), rank 3 in a Mailbox wait (a Python polling loop).
FAILING_JOB = r"""
import sys, time
sys.modules["torch"] = None  # this job needs no torch (the codec works without it): start in 1 s, not 5
from mpi4py import MPI
from runtime import Mailbox, RoleTable, abort_on_error

ROLES = ["controller", "reward", "generator", "trainer"]
comm = MPI.COMM_WORLD
role = ROLES[comm.rank]
what = sys.argv[1]

with abort_on_error(role):
    mb = Mailbox(RoleTable(comm, ROLES))
    comm.Barrier()
    if comm.rank == 2:
        time.sleep(0.5)  # let the others block first
        print(f"T_RAISE={time.time():.6f}", flush=True)
        if what == "exit":
            sys.exit(3)
        raise RuntimeError("boom on purpose")
    if comm.rank in (0, 1):
        comm.recv(source=2, tag=77)  # never sent
    else:
        mb.wait(timeout_s=600)
    print(f"rank {comm.rank} was not stopped", flush=True)
"""


def raise_time(out: str) -> float:
    m = re.search(r"T_RAISE=([0-9.]+)", out)
    assert m, f"the failing rank never got to raise:\n{out}"
    return float(m.group(1))


def test_exception_on_one_rank_aborts_the_job():
    res = run_python(4, FAILING_JOB, "raise", timeout=90)
    ended = time.time()
    out = res.stdout + res.stderr
    assert res.rc != 0, res.output
    assert "rank 2 (generator) failed with RuntimeError: boom on purpose" in out, res.output
    assert "Traceback" in out and "rank 2 (generator) aborting the job" in out, res.output
    assert "was not stopped" not in out, res.output
    elapsed = ended - raise_time(out)
    assert elapsed < ABORT_WITHIN_S, f"the job took {elapsed:.1f} s to end after the exception"


def test_nonzero_sys_exit_aborts_with_its_code():
    res = run_python(4, FAILING_JOB, "exit", timeout=90)
    ended = time.time()
    out = res.stdout + res.stderr
    assert res.rc == 3, res.output
    assert "rank 2 (generator) failed with SystemExit: 3" in out, res.output
    assert ended - raise_time(out) < ABORT_WITHIN_S


def test_run_mpi_kills_a_hung_job():
    # The helper itself: a job that never ends is killed, ranks included, and reported.
    import subprocess
    import sys
    import uuid

    from support.mpi_helpers import MPITimeout

    marker = f"hung-job-{uuid.uuid4().hex}"
    t0 = time.monotonic()
    with pytest.raises(MPITimeout, match="did not finish within 2"):
        run_mpi(2, [sys.executable, "-c", f"import time; time.sleep(600)  # {marker}"], timeout=2)
    assert time.monotonic() - t0 < 20
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], f"ranks left running: {left}"


# ------------------------------------------------------- the MPI test harness itself

HANGING_TESTS = r"""
import pytest
from mpi4py import MPI

@pytest.mark.mpi(min_size=2)
def test_ok():
    pass

@pytest.mark.mpi(min_size=2)
def test_rank1_hangs_in_mpi():
    comm = MPI.COMM_WORLD
    if comm.rank == 1:
        comm.recv(source=0, tag=99)  # never sent: blocked inside MPI, no signal can interrupt it
"""

FAILING_TESTS = r"""
import pytest
from mpi4py import MPI

@pytest.mark.mpi(min_size=2)
def test_ok():
    pass

@pytest.mark.mpi(min_size=2)
def test_fails_on_rank_1_only():
    assert MPI.COMM_WORLD.rank != 1, "rank 1 disagrees"
"""


def pytest_under_mpi(tmp_path: Path, tests: str, *args: str, timeout: float = 90):
    """Run ``tests`` under ``mpirun -n 2 python -m pytest --with-mpi`` with tests/mpi/conftest.py."""
    shutil.copy(REPO / "tests" / "mpi" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_harness.py").write_text(tests)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # keep the repository's settings out
    import sys

    argv = [sys.executable, "-m", "pytest", "--with-mpi", "-p", "no:cacheprovider", "--color=no", str(tmp_path), *args]
    return run_mpi(2, argv, timeout=timeout, cwd=tmp_path)


def test_a_hung_mpi_test_ends_the_whole_job(tmp_path):
    t0 = time.monotonic()
    res = pytest_under_mpi(tmp_path, HANGING_TESTS, "--timeout=2")
    assert res.rc != 0, res.output
    assert "[rank 1] TIMEOUT: test_harness.py::test_rank1_hangs_in_mpi ran past 2.0 s" in res.stderr, res.output
    assert "test_rank1_hangs_in_mpi" in res.stderr.split("TIMEOUT", 2)[-1], "the stack of the hung test"
    assert time.monotonic() - t0 < 45, res.output


def test_only_rank_0_reports_unless_another_rank_fails(tmp_path):
    res = pytest_under_mpi(tmp_path, FAILING_TESTS, "--timeout=30")
    out = res.stdout + res.stderr
    assert res.rc != 0, res.output
    # Rank 0 passed both tests and printed the one normal report.
    assert len(re.findall(r"\b2 passed\b", out)) == 1, res.output
    assert out.count("test session starts") == 2, res.output  # rank 0's, and rank 1's failure report
    # Rank 1's report comes once, after its banner, and only because it failed.
    assert out.count("pytest report of MPI rank 1 of 2") == 1, res.output
    assert out.split("pytest report of MPI rank 1 of 2")[1].count("test session starts") == 1, res.output
    assert "pytest report of MPI rank 0" not in out
    assert "rank 1 disagrees" in out and re.search(r"\b1 failed, 1 passed\b", out), res.output
