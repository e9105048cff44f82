"""Liveness: a rank that goes silent (stopped, frozen, its node lost) ends the job, named.

A crash ends the job at once (``runtime.failure``); a rank that merely stops answering would
leave its peers waiting until ``run.timeout_s``. So every rank but the controller sends a
heartbeat, and the controller aborts the job naming the rank silent for
``run.liveness_timeout_s``. The controller beats back (``ControllerBeat``) so that a silent
controller is named too.

Beats come from a thread on a communicator of their own, so a loop busy for minutes (a long
generation, a checkpoint) keeps beating (MPI runs with ``MPI_THREAD_MULTIPLE``). Each beat
also carries, from :data:`LOOP`, how long since the loop last ticked and the CPU used since:
a loop that has not moved for ``run.stall_timeout_s`` while its process slept is stuck (busy
work burns CPU; a deadlock sleeps). A loop spinning for ever is left to ``run.timeout_s``.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from mpi4py import MPI

from runtime.loop_clock import LOOP, LoopClock

HEARTBEAT_TAG = 7
CONTROLLER_BEAT_TAG = 8  # the controller's beats to the others (ControllerBeat)
# A beat: [wall time, seconds since the loop's last tick, CPU seconds used since] (doubles).
BEAT_FIELDS = 3
# A loop that has not moved while its process used less than this share of one core sleeps.
STALL_CPU_SHARE = 0.1


def beat_interval(timeout_s: float) -> float:
    """How often to beat for a ``timeout_s`` bound: a dozen beats per bound, 0.2 s to 5 s."""
    return min(max(timeout_s / 12, 0.2), 5.0)


# Beats a peer has not taken yet: past this many, a peer that stopped listening costs no more.
MAX_UNTAKEN_BEATS = 64


class _BeatThread:
    """A daemon thread running ``_run`` until :meth:`stop`: the life of both kinds of beats."""

    def __init__(self, name: str):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class Heartbeat(_BeatThread):
    """Sends this rank's heartbeat to ``controller`` on ``comm`` every ``interval_s``, from a thread.

    With ``controller_timeout_s`` the same thread watches the controller's beats
    (``ControllerBeat``) and calls ``on_silent(TimeoutError)`` once none came for that long."""

    def __init__(
        self,
        comm: MPI.Comm,
        controller: int,
        interval_s: float,
        clock: LoopClock = LOOP,
        controller_timeout_s: float = 0.0,
        on_silent=None,
    ):
        self.comm, self.controller, self.interval_s, self.clock = comm, controller, interval_s, clock
        self.controller_timeout_s, self.on_silent = controller_timeout_s, on_silent
        self._buf = np.zeros(BEAT_FIELDS, dtype=np.float64)
        self._heard_buf = np.zeros(1, dtype=np.float64)
        self._heard_at = time.monotonic()  # the start counts as a beat
        self._requests: list[MPI.Request] = []
        super().__init__("mpirl-heartbeat")

    def _run(self) -> None:
        while not self._stop.is_set():
            # A small message completes locally (eager), so this list stays short.
            self._requests = [r for r in self._requests if not r.Test()]
            # An Isend's buffer must not change under it: refill only once every send completed.
            if not self._requests:
                self._buf[0] = time.time()
                self._buf[1:] = self.clock.stuck()
            if len(self._requests) < MAX_UNTAKEN_BEATS:
                self._requests.append(self.comm.Isend([self._buf, MPI.DOUBLE], dest=self.controller, tag=HEARTBEAT_TAG))
            if self.controller_timeout_s and self._controller_is_silent():
                return
            self._stop.wait(self.interval_s)

    def _controller_is_silent(self) -> bool:
        """Take in the controller's beats; past the bound without one, report it (once)."""
        comm = self.comm
        while comm.Iprobe(source=self.controller, tag=CONTROLLER_BEAT_TAG):
            comm.Recv([self._heard_buf, MPI.DOUBLE], source=self.controller, tag=CONTROLLER_BEAT_TAG)
            self._heard_at = time.monotonic()
        silent = time.monotonic() - self._heard_at
        if silent <= self.controller_timeout_s or self._stop.is_set():
            return False
        self.on_silent(
            TimeoutError(
                f"rank {self.controller} (controller) has sent no heartbeat for {silent:.0f} s: it is "
                f"stopped, frozen or cut off (run.liveness_timeout_s is {self.controller_timeout_s:g} s)"
            )
        )
        return True


class ControllerBeat(_BeatThread):
    """The controller's beats to every other rank, every ``interval_s``, from a thread: what
    their ``Heartbeat`` watches (a stopped controller names no one itself)."""

    def __init__(self, comm: MPI.Comm, ranks: list[int], interval_s: float):
        self.comm, self.ranks, self.interval_s = comm, list(ranks), interval_s
        self._buf = np.zeros(1, dtype=np.float64)  # no content: its arrival is the beat
        self._requests: dict[int, list[MPI.Request]] = {rank: [] for rank in self.ranks}
        super().__init__("mpirl-controller-beat")

    def _run(self) -> None:
        while not self._stop.is_set():
            for requests in self._requests.values():
                requests[:] = [r for r in requests if not r.Test()]
            for rank, requests in self._requests.items():
                if len(requests) < MAX_UNTAKEN_BEATS:
                    requests.append(self.comm.Isend([self._buf, MPI.DOUBLE], dest=rank, tag=CONTROLLER_BEAT_TAG))
            self._stop.wait(self.interval_s)


class LivenessMonitor:
    """The controller's side: who was heard from when; ``check()`` raises for a silent rank."""

    def __init__(self, comm: MPI.Comm, watched: dict[int, str], timeout_s: float, stall_timeout_s: float = 0.0):
        """``watched``: rank -> role of every rank that beats. ``stall_timeout_s``: how long a
        rank's loop may stand still while its process sleeps (0: not judged)."""
        self.comm, self.watched, self.timeout_s = comm, dict(watched), timeout_s
        self.stall_timeout_s = stall_timeout_s
        now = time.monotonic()
        self.last_heard = {rank: now for rank in watched}  # the start counts as a beat
        self.checked_at: float | None = None  # the last check (the controller checks twice a second)
        self.loop_state = {rank: (0.0, 0.0) for rank in watched}  # (stuck s, CPU s since), last beat
        self._buf = np.zeros(BEAT_FIELDS, dtype=np.float64)
        self._status = MPI.Status()

    def receive(self) -> None:
        """Take in every heartbeat that has arrived."""
        comm, status = self.comm, self._status
        while comm.Iprobe(source=MPI.ANY_SOURCE, tag=HEARTBEAT_TAG, status=status):
            source = status.Get_source()
            comm.Recv([self._buf, MPI.DOUBLE], source=source, tag=HEARTBEAT_TAG)
            self.last_heard[source] = time.monotonic()
            self.loop_state[source] = (float(self._buf[1]), float(self._buf[2]))

    def check(self) -> None:
        """Raise ``TimeoutError`` naming the rank silent the longest, if past the bound."""
        self.receive()
        now = time.monotonic()
        if self.checked_at is not None and now - self.checked_at > self.timeout_s / 2:
            # This rank itself did not run meanwhile (stopped, frozen, its node suspended): the
            # silence it sees is its own. Counted from now; its peers name it if it was stopped.
            self.last_heard = {rank: max(heard, now - self.timeout_s / 2) for rank, heard in self.last_heard.items()}
        self.checked_at = now
        rank, heard = min(self.last_heard.items(), key=lambda kv: kv[1])
        silent = now - heard
        if silent > self.timeout_s:
            raise TimeoutError(
                f"rank {rank} ({self.watched[rank]}) has sent no heartbeat for {silent:.0f} s: it is "
                f"stopped, frozen or cut off (run.liveness_timeout_s is {self.timeout_s:g} s)"
            )
        if self.stall_timeout_s:
            stalled = [
                (stuck, cpu, r)
                for r, (stuck, cpu) in self.loop_state.items()
                if is_stalled(stuck, cpu, self.stall_timeout_s)
            ]
            if stalled:
                stuck, cpu, rank = max(stalled)
                raise TimeoutError(
                    f"rank {rank} ({self.watched[rank]}) is alive but {stall_message(stuck, cpu, self.stall_timeout_s)}"
                )


def stall_message(stuck: float, cpu: float, stall_timeout_s: float) -> str:
    return (
        f"its loop has made no progress for {stuck:.0f} s, while its process used {cpu:.1f} s of CPU: "
        f"it is stuck (a deadlock, or a wait on a peer that will not answer; run.stall_timeout_s is "
        f"{stall_timeout_s:g} s)"
    )


def is_stalled(stuck: float, cpu: float, stall_timeout_s: float) -> bool:
    return bool(stall_timeout_s) and stuck > stall_timeout_s and cpu < STALL_CPU_SHARE * stuck


class SelfWatch:
    """The controller's watch on its own loop, from a thread: the controller watches the
    others, so a deadlock of its own would otherwise wait for ``run.timeout_s``. A stuck loop
    calls ``on_stall(TimeoutError)`` (the launch passes the job's abort)."""

    def __init__(self, stall_timeout_s: float, on_stall, clock: LoopClock = LOOP):
        self.stall_timeout_s, self.on_stall, self.clock = stall_timeout_s, on_stall, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpirl-selfwatch", daemon=True)

    def start(self) -> SelfWatch:
        if self.stall_timeout_s:
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(beat_interval(self.stall_timeout_s)):
            stuck, cpu = self.clock.stuck()
            if is_stalled(stuck, cpu, self.stall_timeout_s):
                self.on_stall(TimeoutError(f"this rank is alive but {stall_message(stuck, cpu, self.stall_timeout_s)}"))
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
