"""runtime/actor.py's busy clocks: wall seconds of the turns that did work, and, where an actor
asks (``cpu_clock``), their CPU seconds, which leave out the time the OS gave other processes."""

from __future__ import annotations

import time

import pytest

from runtime import Actor
from support.quiet_mailbox import QuietMailbox

pytestmark = pytest.mark.timeout(30)
TURN_S = 0.05


def burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Worker(Actor):
    """Three busy turns of ``work``, then stops."""

    def __init__(self, work, cpu_clock: bool):
        super().__init__(QuietMailbox())
        self.work, self.cpu_clock, self.turns = work, cpu_clock, 0

    def step(self) -> bool:
        self.turns += 1
        if self.turns > 3:
            self.stop()
            return False
        self.work(TURN_S)
        return True


def test_cpu_seconds_count_work_and_not_sleep():
    burnt = []  # the CPU seconds each burn took, as the work itself measures them

    def measured_burn(seconds):
        cpu = time.thread_time()
        burn(seconds)
        burnt.append(time.thread_time() - cpu)

    burner, sleeper = Worker(measured_burn, cpu_clock=True), Worker(time.sleep, cpu_clock=True)
    burner.run()
    sleeper.run()
    assert burner.busy_s >= 3 * TURN_S and sleeper.busy_s >= 3 * TURN_S
    # Computing: the CPU seconds of its work (however many the machine's load left it), plus a little loop.
    assert sum(burnt) <= burner.busy_cpu_s <= sum(burnt) + 0.02
    assert sleeper.busy_cpu_s < 0.2 * sleeper.busy_s  # waiting: wall time, no CPU


def test_without_the_cpu_clock_only_wall_seconds_are_counted():
    worker = Worker(burn, cpu_clock=False)
    worker.run()
    assert worker.busy_s >= 3 * TURN_S and worker.busy_cpu_s == 0.0
