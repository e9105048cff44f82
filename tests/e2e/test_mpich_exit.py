"""Under MPICH's mpiexec (hydra): a rank leaving through launch/fast_exit.py tells hydra it
finalized, so hydra never takes a finished job for a crash.

Without it hydra SIGKILLed the ranks still on their way out whenever the first to leave went
before them (2 of 3 jobs under load ended with code 9). Skipped under Open MPI, where
``make test`` runs; ``make test-mpich`` runs it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from launch.cli import find_mpiexec, is_open_mpi
from support.paths import REPO

pytestmark = pytest.mark.timeout(120)

RANK = """\
import sys
sys.path.insert(0, sys.argv[1])
from launch import fast_exit
fast_exit.install()
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
fast_exit.exit_now(0)
"""


@pytest.mark.skipif(is_open_mpi(find_mpiexec()), reason="hydra (MPICH's mpiexec) only: here mpiexec is Open MPI's")
def test_every_rank_finalizes_with_hydra_before_it_leaves():
    done = subprocess.run(
        [find_mpiexec(), "-verbose", "-n", "3", sys.executable, "-c", RANK, str(REPO)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("cmd=finalize_ack") == 3, done.stdout[-3000:]
