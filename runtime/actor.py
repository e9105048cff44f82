"""Actors: one role object per rank, message handlers plus a compute step, one event loop.

An actor declares a handler per message type with ``@handles(Type)`` and may override
``step()`` for compute that is not triggered by a message (a generator sampling its next
batch, say). The loop interleaves the two: it handles every message that has arrived,
runs one step, and backs off exponentially (up to ``max_idle_sleep_s``) when neither did
anything, so an idle rank does not hold a core at 100%. An actor's first messages belong in
``on_start()``, called as its loop starts, rather than in its constructor.
"""

from __future__ import annotations

import time

from runtime.backoff import MAX_SLEEP_S, MIN_SLEEP_S, Backoff
from runtime.faults import actor_fault
from runtime.loop_clock import LOOP
from runtime.mailbox import Envelope, Mailbox
from runtime.messages import Stop
from runtime.preemption import PREEMPTION
from runtime.spans import STOP_PREFIX, Spans


def handles(*msg_types):
    """Method decorator: this method handles messages of ``msg_types`` (called with an Envelope)."""

    def mark(fn):
        fn.__handles__ = msg_types
        return fn

    return mark


class Actor:
    # The idle back-off (runtime/backoff.py says why these values); a subclass may change them.
    min_idle_sleep_s = MIN_SLEEP_S
    max_idle_sleep_s = MAX_SLEEP_S
    # Also count busy turns' CPU seconds (busy_cpu_s): a rank sharing a core with others spends
    # wall time in a turn while the OS runs them. Off by default: a clock read per loop turn.
    cpu_clock = False

    def __init__(self, mailbox: Mailbox):
        self.mailbox = mailbox
        table = mailbox.role_table
        self.spans = Spans(table.rank, table.role, table.index)  # busy intervals, for timelines
        self.running = True
        self.stop_reason: str | None = None
        # Messages dispatched so far: the fault tests' clock (runtime.faults).
        self._dispatched = 0
        # Seconds of turns that did work (idle polls and back-off sleeps left out).
        self.busy_s = 0.0
        self.busy_cpu_s = 0.0  # of those turns, the CPU seconds of this thread (only with cpu_clock)
        # When the real work ended (time.time()), if the actor says; from then on is "stop.finish".
        self.work_done_at: float | None = None
        self._handlers = {}
        for name in dir(type(self)):
            fn = getattr(type(self), name)
            for t in getattr(fn, "__handles__", ()):
                self._handlers[t] = getattr(self, name)

    @property
    def messages_handled(self) -> int:
        """Messages this actor has dispatched to its handlers so far."""
        return self._dispatched

    # Overridables ---------------------------------------------------------------

    def on_start(self) -> None:
        """Called once as the loop starts: an actor's first messages go here, not in its
        constructor, so that whoever runs it decides where and when it starts."""

    def step(self) -> bool:
        """Do one unit of work that no message triggered; return True if anything was done."""
        return False

    def on_stop(self, reason: str) -> None:
        """Called once when a Stop arrives, before the mailbox closes."""

    def on_preempt(self) -> None:
        """Called once when this process gets SIGTERM, SIGUSR1 or SIGINT (``runtime.preemption``)."""

    # The loop -------------------------------------------------------------------

    @handles(Stop)
    def _handle_stop(self, env: Envelope) -> None:
        self.stop(env.msg.reason)

    def stop(self, reason: str = "done") -> None:
        if self.running:
            self.running = False
            self.stop_reason = reason
            self.on_stop(reason)

    def dispatch(self, env: Envelope) -> None:
        handler = self._handlers.get(type(env.msg))
        if handler is None:
            raise RuntimeError(
                f"{type(self).__name__} at {self.mailbox.address} has no handler for "
                f"{type(env.msg).__name__} (from {env.sender})"
            )
        self._dispatched += 1
        actor_fault(self.mailbox.role_table.role, self._dispatched)
        handler(env)

    def handle_pending(self) -> int:
        """Handle every message that has arrived; return how many. Stops early on Stop."""
        n = 0
        while self.running:
            env = self.mailbox.poll()
            if env is None:
                break
            self.dispatch(env)
            n += 1
        return n

    def run(self) -> None:
        try:
            self.on_start()
            self._loop()
        except BaseException:
            self.spans.flush()  # a failing rank's last seconds too, before the job is aborted
            raise

    def _loop(self) -> None:
        backoff = Backoff(self.min_idle_sleep_s, self.max_idle_sleep_s)
        preempted = False
        spans = self.spans
        cpu_clock = self.cpu_clock
        while self.running:
            LOOP.tick()  # a turn is progress (runtime.liveness tells a stuck loop from a busy one)
            turn_started = time.perf_counter()
            turn_cpu = time.thread_time() if cpu_clock else 0.0
            if turn_started >= spans.flush_at:  # every few seconds, so a killed run can be traced
                spans.flush()
            if PREEMPTION.requested and not preempted:
                preempted = True
                self.on_preempt()
            busy = self.handle_pending() > 0
            if self.running:
                busy = self.step() or busy
            self.mailbox.progress()
            if busy:
                self.busy_s += time.perf_counter() - turn_started
                if cpu_clock:
                    self.busy_cpu_s += time.thread_time() - turn_cpu
                backoff.reset()
            else:
                backoff.sleep()
        stopped = time.time()
        if self.work_done_at is not None:
            self.spans.add(STOP_PREFIX + "finish", self.work_done_at, stopped)
        self.mailbox.close()
        self.spans.add(STOP_PREFIX + "mailbox_close", stopped, time.time())
