"""runtime.liveness: a silent rank, and a beating rank whose loop is stuck, are told from busy ones."""

from __future__ import annotations

import time

import pytest
from mpi4py import MPI

from runtime.liveness import Heartbeat, LivenessMonitor
from runtime.loop_clock import LoopClock


class FixedClock(LoopClock):
    """A loop that reports fixed figures: (seconds since its last tick, CPU seconds since)."""

    def __init__(self, stuck_s: float, cpu_s: float):
        super().__init__()
        self.figures = (stuck_s, cpu_s)

    def stuck(self):
        return self.figures


def test_the_loop_clock_measures_stillness_and_the_cpu_used_meanwhile():
    clock = LoopClock()
    assert clock.stuck() == (0.0, 0.0)  # not looping yet: not judged
    clock.tick()
    time.sleep(0.3)
    stuck, cpu = clock.stuck()
    assert 0.25 < stuck < 2 and cpu < 0.1  # asleep
    clock.tick()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    stuck, cpu = clock.stuck()
    assert cpu >= 0.3 and stuck >= cpu * 0.9  # busy: the CPU kept pace with the clock
    clock.tick()
    assert clock.stuck()[0] < 0.05


def watch(clock: LoopClock, stall_timeout_s: float) -> LivenessMonitor:
    """A rank beating to itself (COMM_SELF), and the monitor that hears it, after a few beats."""
    comm = MPI.COMM_SELF.Dup()
    monitor = LivenessMonitor(comm, {0: "generator"}, timeout_s=30, stall_timeout_s=stall_timeout_s)
    beat = Heartbeat(comm, 0, interval_s=0.02, clock=clock).start()
    try:
        time.sleep(0.2)
        monitor.receive()
    finally:
        beat.stop()
    monitor.receive()
    return monitor


@pytest.mark.parametrize(
    ("stuck_s", "cpu_s", "stall_timeout_s", "stuck"),
    [
        (100.0, 1.0, 60.0, True),  # still for 100 s on 1 % of a core: a deadlock
        (100.0, 95.0, 60.0, False),  # still but busy: a long generation in C code
        (30.0, 0.0, 60.0, False),  # asleep, but not for long enough
        (100.0, 1.0, 0.0, False),  # 0: not watched
    ],
)
def test_a_loop_that_stands_still_while_its_process_sleeps_is_named(stuck_s, cpu_s, stall_timeout_s, stuck):
    monitor = watch(FixedClock(stuck_s, cpu_s), stall_timeout_s)
    assert monitor.loop_state[0] == (stuck_s, cpu_s)  # the figures came with the beats
    if stuck:
        with pytest.raises(
            TimeoutError, match=r"rank 0 \(generator\) is alive but its loop has made no progress for 100 s"
        ):
            monitor.check()
    else:
        monitor.check()


def test_a_silent_rank_is_named_before_its_loop_is_judged():
    comm = MPI.COMM_SELF.Dup()
    monitor = LivenessMonitor(comm, {0: "trainer"}, timeout_s=0.2, stall_timeout_s=0.1)
    time.sleep(0.3)
    with pytest.raises(TimeoutError, match=r"rank 0 \(trainer\) has sent no heartbeat"):
        monitor.check()


def test_the_controller_watches_its_own_loop_from_a_thread():
    from runtime.liveness import SelfWatch

    seen = []
    watch = SelfWatch(0.2, seen.append, clock=FixedClock(5.0, 0.0)).start()  # asleep for 5 s
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.stop()
    assert len(seen) == 1 and isinstance(seen[0], TimeoutError)
    assert "this rank is alive but its loop has made no progress for 5 s" in str(seen[0])
    busy = []
    watch = SelfWatch(0.2, busy.append, clock=FixedClock(5.0, 5.0)).start()  # busy for 5 s
    time.sleep(0.6)
    watch.stop()
    assert busy == []
    off = SelfWatch(0.0, busy.append, clock=FixedClock(5.0, 0.0)).start()  # 0: not watched
    time.sleep(0.3)
    off.stop()
    assert busy == []


def test_a_long_call_that_cannot_tick_itself_counts_as_progress_while_it_runs():
    clock = LoopClock()
    with clock.ticking(every_s=0.05):
        time.sleep(0.4)  # a vLLM generate: the work is in another process
        assert clock.stuck()[0] < 0.3
    time.sleep(0.3)
    assert clock.stuck()[0] >= 0.25  # after the call, stillness counts again


def test_a_rank_hears_whether_its_controller_beats():
    """A stopped controller names no one: the other ranks' heartbeat threads watch its beats."""
    from runtime.liveness import ControllerBeat

    comm = MPI.COMM_SELF.Dup()  # rank 0 plays both sides
    silent = []
    beat = Heartbeat(comm, 0, interval_s=0.02, controller_timeout_s=0.3, on_silent=silent.append).start()
    controller = ControllerBeat(comm, [0], interval_s=0.02).start()
    time.sleep(0.6)
    assert not silent  # beating: nothing to report
    controller.stop()  # as SIGSTOP would
    time.sleep(0.6)
    beat.stop()
    assert len(silent) == 1
    assert "rank 0 (controller) has sent no heartbeat" in str(silent[0])


def test_a_monitor_that_was_stopped_itself_does_not_blame_the_others():
    """SIGSTOP of the controller, then SIGCONT (Open MPI's abort sends it): the silence was its own."""
    comm = MPI.COMM_SELF.Dup()
    monitor = LivenessMonitor(comm, {0: "generator"}, timeout_s=0.4)
    monitor.check()
    time.sleep(0.6)  # not checking: this rank did not run
    monitor.check()  # no TimeoutError naming the generator
    time.sleep(0.5)
    with pytest.raises(TimeoutError, match=r"rank 0 \(generator\) has sent no heartbeat"):
        for _ in range(10):  # checking on time again, a rank that stays silent is named
            monitor.check()
            time.sleep(0.1)
