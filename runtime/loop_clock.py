"""When this rank's loop last made progress: ``LOOP.tick()`` from wherever long work advances.

Kept apart from ``runtime.liveness`` (which reads it from the heartbeat thread) so the engines
and the checkpoint writer can tick without importing MPI.
"""

from __future__ import annotations

import contextlib
import threading
import time


class LoopClock:
    """When this rank's loop last made progress, and the process's CPU time then.

    ``tick()`` costs two clock reads, so the engine can call it every decode step. Before the
    first tick (a model loading, the actor being built) the loop is not judged: only the
    heartbeat is.
    """

    def __init__(self) -> None:
        self.last: float | None = None
        self.cpu_at_last = 0.0

    def tick(self) -> None:
        self.cpu_at_last = time.process_time()
        self.last = time.monotonic()

    @contextlib.contextmanager
    def ticking(self, every_s: float = 1.0):
        """Tick from a thread while the block runs: for a long call that cannot tick itself and
        whose work may not show as this process's CPU (vLLM's engine core runs in a process of
        its own). Hangs inside it are then left to that library's own checks."""
        done = threading.Event()

        def beat():
            while not done.wait(every_s):
                self.tick()

        thread = threading.Thread(target=beat, name="mpirl-loop-ticker", daemon=True)
        self.tick()
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=every_s + 5)
            self.tick()

    def stuck(self) -> tuple[float, float]:
        """(seconds since the last tick, CPU seconds of this process since); 0s before any tick."""
        last = self.last
        if last is None:
            return 0.0, 0.0
        return time.monotonic() - last, time.process_time() - self.cpu_at_last


LOOP = LoopClock()  # this process's loop (one actor per rank)
