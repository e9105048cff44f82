"""Exponential back-off for polling loops: how an idle rank waits without holding a core.

MPI messages are polled for, not waited on (a blocking receive would stop the rank from doing
anything else), so a loop that finds nothing sleeps a little before it looks again. The first
sleep is short, so that a reply that is about to arrive is seen quickly; each idle round
doubles it up to a ceiling, which bounds both the latency a message can pick up and the CPU an
idle rank burns (at 2 ms, a few hundred wake-ups a second).
"""

from __future__ import annotations

import time

MIN_SLEEP_S = 20e-6  # first sleep: short, so a reply that is about to arrive is seen quickly
MAX_SLEEP_S = 2e-3  # ceiling: bounds both added latency and idle CPU use


class Backoff:
    """``sleep()`` when a round found nothing to do (each doubles, up to ``max_s``), ``reset()``
    when one did."""

    __slots__ = ("min_s", "max_s", "_next")

    def __init__(self, min_s: float = MIN_SLEEP_S, max_s: float = MAX_SLEEP_S):
        if not 0 < min_s <= max_s:
            raise ValueError(f"need 0 < min_s <= max_s, got {min_s} and {max_s}")
        self.min_s, self.max_s = min_s, max_s
        self._next = min_s

    def reset(self) -> None:
        self._next = self.min_s

    def sleep(self) -> None:
        time.sleep(self._next)
        self._next = min(self._next * 2, self.max_s)


def wait_for_all(comm, max_s: float = 5e-3) -> None:
    """A barrier over ``comm`` that sleeps while it waits, where ``comm.Barrier()`` would spin.

    A rank blocked in an MPI collective polls at full speed (Open MPI has no blocking wait).
    Ranks with little to prepare would spin there and take cores from the ranks still importing
    torch. Call it before a collective that ranks may reach at very different times.
    """
    request = comm.Ibarrier()
    backoff = Backoff(max_s=max_s)
    while not request.Test():
        backoff.sleep()
