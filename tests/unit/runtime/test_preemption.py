"""runtime/preemption.py: a signal during a rank's start-up (MPI_Init, imports, the preflight:
seconds) is kept for the actor loop, as one later is; the same signal delivered twice at once
(by Slurm and by the launcher) is one; a second one later ends the process."""

import subprocess
import sys

from runtime.preemption import SAME_SIGNAL_S
from support.mpi_helpers import REPO

# The entry point of every rank, with launch.main stood in for: its main() is where the start
# would spend its seconds. It signals itself there, as Slurm's scancel would.
ENTRY = """\
import os, runpy, signal, sys, time, types
sys.path.insert(0, sys.argv[1])
stand_in = types.ModuleType("launch.main")

def main():
    for pause in sys.argv[2].split(","):  # seconds before each SIGTERM
        time.sleep(float(pause))
        os.kill(os.getpid(), signal.SIGTERM)
    from runtime.preemption import PREEMPTION
    print("still running, preemption requested:", PREEMPTION.requested, flush=True)

stand_in.main = main
sys.modules["launch.main"] = stand_in
runpy.run_module("launch", run_name="__main__")
"""


def run(*pauses: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", ENTRY, str(REPO), ",".join(map(str, pauses))]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_sigterm_during_start_up_is_kept_not_fatal():
    done = run(0)
    assert done.returncode == 0, done.stderr
    assert "still running, preemption requested: True" in done.stdout
    assert "SIGTERM: stopping after the step in progress" in done.stderr


def test_the_same_sigterm_twice_at_once_is_one_preemption():
    # scancel signals mpirun and every rank; mpirun forwards its own: each rank gets two
    done = run(0, 0)
    assert done.returncode == 0, done.stderr
    assert "still running, preemption requested: True" in done.stdout
    assert "second signal" not in done.stderr


def test_a_second_sigterm_later_ends_the_process_at_once_even_before_mpi_started():
    done = run(0, SAME_SIGNAL_S + 0.2)
    assert done.returncode == 128 + 15, done.stderr
    assert "second signal SIGTERM: aborting the job" in done.stderr
    assert "still running" not in done.stdout
