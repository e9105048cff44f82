"""Liveness: a rank that goes silent (stopped, frozen, its node lost) ends the job, named.

A crash ends the job at once (``runtime.failure``), but a rank that merely stops answering,
say a process stopped with SIGSTOP, a node that froze, a machine cut off, leaves its peers
waiting: only ``run.timeout_s`` (an hour by default) would end it. So every rank but the
controller sends a heartbeat every few seconds, and the controller, the one rank that hears
from all, aborts the job naming the rank and role that has been silent for
``run.liveness_timeout_s`` (60 s by default).

Heartbeats come from a thread of their own, on a communicator of their own: the actor's
loop may legitimately be busy for minutes (a long generation, a checkpoint), and the thread
keeps beating meanwhile (torch, vLLM and numpy release the GIL in their long calls). What it
cannot see is a rank whose process lives but whose loop is stuck (a deadlock); that is
``run.timeout_s``'s to catch. MPI is initialised with ``MPI_THREAD_MULTIPLE`` (mpi4py's
default), so the thread may send while the loop uses the mailbox's communicator.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from mpi4py import MPI

HEARTBEAT_TAG = 7


def beat_interval(timeout_s: float) -> float:
    """How often to beat for a ``timeout_s`` bound: a dozen beats per bound, 0.2 s to 5 s."""
    return min(max(timeout_s / 12, 0.2), 5.0)


class Heartbeat:
    """Sends this rank's heartbeat to ``controller`` on ``comm`` every ``interval_s``, from a thread."""

    def __init__(self, comm: MPI.Comm, controller: int, interval_s: float):
        self.comm, self.controller, self.interval_s = comm, controller, interval_s
        self._stop = threading.Event()
        self._buf = np.zeros(1, dtype=np.float64)
        self._requests: list[MPI.Request] = []
        self._thread = threading.Thread(target=self._run, name="mpirl-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            # Sends the controller has not taken yet are let go once they complete; a small
            # message completes locally (eager), so this list stays short.
            self._requests = [r for r in self._requests if not r.Test()]
            if len(self._requests) < 64:  # a controller that stopped listening costs nothing more
                self._buf[0] = time.time()
                self._requests.append(self.comm.Isend([self._buf, MPI.DOUBLE], dest=self.controller, tag=HEARTBEAT_TAG))
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class LivenessMonitor:
    """The controller's side: who was heard from when; ``check()`` raises for a silent rank."""

    def __init__(self, comm: MPI.Comm, watched: dict[int, str], timeout_s: float):
        """``watched``: rank -> role of every rank that beats."""
        self.comm, self.watched, self.timeout_s = comm, dict(watched), timeout_s
        now = time.monotonic()
        self.last_heard = {rank: now for rank in watched}  # the start counts as a beat
        self._buf = np.zeros(1, dtype=np.float64)
        self._status = MPI.Status()

    def receive(self) -> None:
        """Take in every heartbeat that has arrived."""
        comm, status = self.comm, self._status
        while comm.Iprobe(source=MPI.ANY_SOURCE, tag=HEARTBEAT_TAG, status=status):
            source = status.Get_source()
            comm.Recv([self._buf, MPI.DOUBLE], source=source, tag=HEARTBEAT_TAG)
            self.last_heard[source] = time.monotonic()

    def check(self) -> None:
        """Raise ``TimeoutError`` naming the rank silent the longest, if past the bound."""
        self.receive()
        now = time.monotonic()
        rank, heard = min(self.last_heard.items(), key=lambda kv: kv[1])
        silent = now - heard
        if silent > self.timeout_s:
            raise TimeoutError(
                f"rank {rank} ({self.watched[rank]}) has sent no heartbeat for {silent:.0f} s: it is "
                f"stopped, frozen or cut off (run.liveness_timeout_s is {self.timeout_s:g} s)"
            )
