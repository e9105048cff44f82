"""Preemption: a signal asks this rank's actor to stop at its next safe point; a second aborts.

SIGTERM and SIGUSR1 (what Slurm sends with ``--signal``, on ``scancel`` and at the time limit,
and what ``mpirun`` forwards to its ranks) and SIGINT (Ctrl-C) only set a flag here: nothing
else is safe inside a signal handler. The actor loop sees the flag and calls
``Actor.on_preempt()`` once; what a safe point is belongs to the program (mpirl's: the end of
the step in progress, then a checkpoint). A second signal means "now": the job is aborted
(one within ``SAME_SIGNAL_S`` of the first is the first, delivered again by another path).

The handlers are installed first thing in a rank (``launch/__main__.py``), so that a signal
during start-up also ends the job resumable (75), not with the default death (143).
"""

from __future__ import annotations

import os
import signal
import sys
import time

SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class Preemption:
    """The flag one process's signal handlers set (use the module's ``PREEMPTION``)."""

    def __init__(self):
        self.requested = False
        self.signum: int | None = None
        self.first_at: float | None = None  # time.monotonic() of the first signal

    def install(self) -> None:
        for s in SIGNALS:
            signal.signal(s, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        now = time.monotonic()
        if self.requested and now - self.first_at < SAME_SIGNAL_S:
            return  # the first one again, by another path (see SAME_SIGNAL_S): not "now"
        if self.requested:  # the second one: abort at once, as an unhandled failure would
            os.write(2, f"[mpirl] second signal {signal.Signals(signum).name}: aborting the job\n".encode())
            mpi = sys.modules.get("mpi4py.MPI")  # not imported yet, or not started: no job to abort
            if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
                from runtime.failure import wait_until_output_is_read  # mpi4py is loaded by now

                wait_until_output_is_read()
                mpi.COMM_WORLD.Abort(128 + signum)
            os._exit(128 + signum)
        self.requested, self.signum, self.first_at = True, signum, now
        os.write(2, f"[mpirl] {signal.Signals(signum).name}: stopping after the step in progress\n".encode())

    def clear(self) -> None:
        self.requested, self.signum, self.first_at = False, None, None


# A preemption often reaches a rank twice within milliseconds (scancel signals every process of
# the step and the launcher forwards it too): a repeat this soon is the same signal, not "now".
SAME_SIGNAL_S = 1.0


PREEMPTION = Preemption()


def exit_code_of(stop_reason: str | None) -> int:
    """0 for a finished run, ``EXIT_RESUMABLE`` for one stopped by preemption with a checkpoint."""
    return EXIT_RESUMABLE if stop_reason == PREEMPTED else 0


# The exit code of a job that stopped on a signal after writing a checkpoint: "checkpointed,
# resumable" (sysexits.h's EX_TEMPFAIL, "temporary failure; the user is invited to retry").
EXIT_RESUMABLE = 75
PREEMPTED = "preempted"  # the Stop reason of such a job

__all__ = ["EXIT_RESUMABLE", "PREEMPTED", "PREEMPTION", "Preemption", "exit_code_of"]
