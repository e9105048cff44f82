"""Scoring responses in worker processes, so that a time limit holds whatever a reward does.

A reward rank must not fork, and neither a thread nor a signal can stop code that never
returns to the interpreter or survive a segfault; so rewards run in worker processes
(``roles.rewards.worker``) that this module schedules and replaces.

``RewardSandbox.score(items)`` pipelines items into the workers and reads results one by one,
each with a deadline of ``timeout_s`` from when its worker began it. An item past its deadline
scores 0 (``timed_out``) and its worker is killed and replaced; a worker that dies costs its
item one failure. Every wait has a deadline and sends never block (a worker never holds more
unread bytes than its pipe buffers). Not known here: what a reward computes
(``roles.rewards.combine``), what the counters mean to the run.
"""

from __future__ import annotations

import atexit
import pickle
import select
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing import connection
from typing import Any

from roles.rewards import REWARDS, reward_object
from roles.rewards import worker as _worker
from roles.rewards.combine import ComponentSpec, check_labels
from roles.rewards.worker import RewardBuildError
from runtime.loop_clock import LOOP

# Items queued in one worker: enough to hide the round trip and send several per message,
# few enough that a call spreads evenly over several workers.
MAX_IN_FLIGHT = 8


@dataclass
class SampleResult:
    score: float  # weighted sum of the components; 0 when timed out or the worker died
    components: dict[str, float]  # as roles.rewards.combine.SampleScore
    failures: int = 0  # failed components; 1 when the worker died scoring this item
    timed_out: bool = False  # cut at the time limit
    notes: dict[str, str] = field(default_factory=dict)  # learned components' words (a judge's verdict)


class _Worker:
    """A started worker and the items it holds, oldest (the one it is scoring) first."""

    def __init__(self, server, specs, startup_timeout_s: float):
        self.proc, self.requests, self.results = _worker.start(server, specs, startup_timeout_s)
        # Unread requests stay under half the buffer; the rest is room for framing.
        self.window = _worker.pipe_capacity(self.requests) // 2
        self.held: deque[tuple[int, int]] = deque()  # (item index, request bytes)
        self.held_bytes = 0
        self.head_since = 0.0  # when the worker began the oldest item it holds
        self._poller = select.poll()  # a result ready? (cheaper than Connection.poll)
        self._poller.register(self.results.fileno(), select.POLLIN)
        self._stop_lock = threading.Lock()
        self._stopped = False

    def send(self, batch: list[tuple[int, bytes]]) -> None:
        if not self.held:
            self.head_since = time.monotonic()
        for index, payload in batch:
            self.held.append((index, len(payload)))
            self.held_bytes += len(payload)
        self.requests.send_bytes(pickle.dumps([payload for _, payload in batch], pickle.HIGHEST_PROTOCOL))

    def has_result(self) -> bool:
        return bool(self._poller.poll(0))  # also true at EOF: the worker died

    def pop_head(self) -> int:
        index, nbytes = self.held.popleft()
        self.held_bytes -= nbytes
        self.head_since = time.monotonic()
        return index

    def stop(self) -> None:
        # Once, even when close() (another thread) and an interrupted score() both get here:
        # a second close of a pipe could close a descriptor that was meanwhile reused.
        with self._stop_lock:
            if not self._stopped:
                self._stopped = True
                _worker.stop(self.proc, self.requests, self.results)


class _SandboxClosed(RuntimeError):
    """``score`` on a closed sandbox, or one closed under it by another thread."""


_OPEN: weakref.WeakSet = weakref.WeakSet()  # sandboxes not yet closed


def _close_open_sandboxes() -> None:
    for sandbox in list(_OPEN):
        sandbox.close()


# Registered after multiprocessing's exit hook (imported above), so it runs first (atexit is
# LIFO): that hook SIGTERMs and joins children, and a worker stuck in C code may block SIGTERM.
atexit.register(_close_open_sandboxes)


def _stop_all(workers: list[_Worker], server) -> None:
    for w in workers:
        w.stop()
    workers.clear()
    _worker.stop_server(server)


def _preload_modules(specs: Sequence[ComponentSpec]) -> list[str]:
    """What the fork server imports ahead: the worker, built-in rewards, and their ``preload``.

    User modules are left to the workers: the server would die on an import error.
    """
    mods = ["roles.rewards.server_signals", _worker.__name__]
    for spec in specs:
        if spec.name in REWARDS:
            mods.append(REWARDS[spec.name].partition(":")[0])
            try:
                mods.extend(getattr(reward_object(spec.name), "preload", ()))
            except Exception:  # noqa: BLE001 - the worker's build reports it, as RewardBuildError
                pass
    return list(dict.fromkeys(mods))


class RewardSandbox:
    """``CombinedReward(specs)`` in ``workers`` processes, each item bounded by ``timeout_s``.

    Counters: ``failures`` (failed components, and items whose worker died), ``timeouts``,
    ``restarts``. Raises RewardBuildError (the worker's message) when the rewards cannot
    be built. One caller at a time: ``score`` is not meant to be called from two threads.
    ``close`` may come from another thread (the rank exiting while a thread scores): the
    ``score`` in progress then raises RuntimeError and starts no worker.
    """

    def __init__(
        self, specs: Sequence[ComponentSpec], timeout_s: float, workers: int = 1, startup_timeout_s: float = 120.0
    ):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers!r}")
        check_labels(specs)
        self.specs = tuple(specs)
        self.timeout_s = float(timeout_s)
        # Covers the first start: the fork server's interpreter and its preloads (seconds on
        # a shared file system), then each worker's build.
        self.startup_timeout_s = float(startup_timeout_s)
        self.failures = self.timeouts = self.restarts = 0
        self._zero = {**{s.label: 0.0 for s in self.specs}, "correct": 0.0}
        self._workers: list[_Worker] = []
        self._server = _worker.new_server(_preload_modules(self.specs))
        self._closer = weakref.finalize(self, _stop_all, self._workers, self._server)  # on collection
        _OPEN.add(self)
        try:
            for _ in range(workers):
                self._workers.append(_Worker(self._server, self.specs, self.startup_timeout_s))
        except BaseException:
            self.close()
            raise

    def score(self, items: Sequence[tuple[str, Any]]) -> list[SampleResult]:
        """Results for ``(response_text, example)`` pairs, in their order."""
        self._check_open()
        payloads = [pickle.dumps(tuple(item), pickle.HIGHEST_PROTOCOL) for item in items]
        out: list[SampleResult | None] = [None] * len(items)
        pending = deque(range(len(items)))
        for i, w in enumerate(self._workers):
            if not w.proc.is_alive():  # died between calls (killed from outside)
                self._replace(i)
        try:
            while pending or any(w.held for w in self._workers):
                # Progress, for the stuck-loop watch: the scoring is the workers' (other
                # processes' CPU), and each wait below ends within reward.timeout_s.
                LOOP.tick()
                self._dispatch(pending, payloads, out)
                busy = [w for w in self._workers if w.held]
                if not busy:  # every send found its worker dead: they were replaced, dispatch again
                    continue
                deadline = min(w.head_since for w in busy) + self.timeout_s
                connection.wait([w.results for w in busy], timeout=max(0.0, deadline - time.monotonic()))
                self._check_open()  # closed from another thread (the rank exiting): the workers are gone
                for w in busy:
                    self._collect(self._workers.index(w), pending, out)
        except BaseException as exc:
            # Interrupted (KeyboardInterrupt, a failed restart): results still on their way
            # would be taken for the next call's items, so those workers go.
            for w in self._workers:
                if w.held:
                    w.stop()
            if not self._closer.alive and isinstance(exc, Exception) and not isinstance(exc, _SandboxClosed):
                # close() came from another thread (stopped the server, emptied the worker
                # list under this loop): say so, not which step failed.
                raise _SandboxClosed("the reward sandbox is closed") from exc
            raise
        return out  # type: ignore[return-value]

    def _dispatch(self, pending: deque, payloads: list[bytes], out: list) -> None:
        """Tops up each worker that has worked off half its share, in one message."""
        outstanding = len(pending) + sum(len(w.held) for w in self._workers)
        share = min(MAX_IN_FLIGHT, -(-outstanding // len(self._workers)))  # an even split
        for i, w in enumerate(self._workers):
            if not pending or len(w.held) > share // 2:
                continue
            batch, nbytes = [], w.held_bytes
            while pending and len(w.held) + len(batch) < share:
                size = len(payloads[pending[0]])
                if (w.held or batch) and nbytes + size > w.window:
                    break  # an item over the window goes alone, to an idle worker reading it
                index = pending.popleft()
                batch.append((index, payloads[index]))
                nbytes += size
            try:
                w.send(batch)
            except OSError:  # the worker is dead: it loses its oldest item, like any crash
                self._crashed(i, pending, out)

    def _collect(self, i: int, pending: deque, out: list) -> None:
        w = self._workers[i]
        while w.held and w.has_result():
            try:
                score, components, failures = pickle.loads(w.results.recv_bytes())
            except (EOFError, OSError):
                self._crashed(i, pending, out)
                return
            self.failures += failures
            out[w.pop_head()] = SampleResult(score, components, failures)
        if w.held and time.monotonic() >= w.head_since + self.timeout_s:
            self.timeouts += 1
            out[w.held[0][0]] = SampleResult(0.0, dict(self._zero), 0, timed_out=True)
            self._requeue(list(w.held)[1:], pending)
            self._replace(i)

    def _crashed(self, i: int, pending: deque, out: list) -> None:
        held = list(self._workers[i].held)
        if held:
            self.failures += 1
            out[held[0][0]] = SampleResult(0.0, dict(self._zero), 1)
        self._requeue(held[1:], pending)
        self._replace(i)

    def _replace(self, i: int) -> None:
        self._workers[i].stop()
        self._check_open()  # a worker killed by close() is not replaced
        fresh = _Worker(self._server, self.specs, self.startup_timeout_s)  # ServerStopped: close() came
        if not self._closer.alive:  # close() came while it started: it must not outlive the sandbox
            fresh.stop()
        self._check_open()
        self._workers[i] = fresh
        self.restarts += 1

    def _check_open(self) -> None:
        if not self._closer.alive:  # the finalizer leaves its registry before it stops anything
            raise _SandboxClosed("the reward sandbox is closed")

    @staticmethod
    def _requeue(held: list[tuple[int, int]], pending: deque) -> None:
        pending.extendleft(index for index, _ in reversed(held))  # first in line, in order

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (they change when one is replaced)."""
        return [w.proc.pid for w in self._workers]

    def close(self) -> None:
        """Kills the workers and their server. Safe to call twice; also runs when the sandbox
        is garbage-collected and at interpreter exit."""
        self._closer()
        _OPEN.discard(self)

    def __enter__(self) -> RewardSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["RewardBuildError", "RewardSandbox", "SampleResult"]
