"""Running an environment's calls in sandboxed worker processes, asynchronously and bounded.

``EnvironmentPool`` keeps ``environment.workers`` processes (``pool_worker``), each holding one
built environment and doing one call at a time, so a slow tool holds up only its own
episode's call; the other calls wait in the pool's queue for the next free worker. ``submit``
queues a call, ``ready`` hands back the calls that have finished or failed, waiting at most
as long as asked: nothing here blocks longer (a worker that replaces a killed one starts in
the background).

A call past ``environment.timeout_s`` fails ("timed out after N s") and its worker is killed
and replaced; a worker that dies fails its call ("the environment worker died (...)") and is
replaced; an exception in the environment fails its call only. An environment that cannot
be built raises EnvironmentBuildError (the worker's message) at construction. Not known here:
episodes, tokens, what the calls mean (``roles.episodes``).
"""

from __future__ import annotations

import atexit
import pickle
import signal
import time
import weakref
from collections import deque
from dataclasses import dataclass
from multiprocessing import connection
from typing import Any

from roles.environments import ENVIRONMENTS
from roles.environments import pool_worker as _pool_worker
from roles.environments.base import EnvironmentConfig
from roles.rewards import worker as _worker

CALLS = ("reset", "step", "final")


class EnvironmentBuildError(RuntimeError):
    """A worker could not build the environment, or did not start; the message says why."""


@dataclass
class CallResult:
    key: int  # as submitted
    ok: bool
    value: Any  # reset: Opening; step: (state, StepResult); final: float | None; None if not ok
    error: str | None  # why it failed
    seconds: float  # from the call's start in a worker (or its submission, if it never started)
    # Failed for want of time or of its worker (its state from before the call is still good),
    # not because the environment raised
    timed_out: bool = False
    crashed: bool = False


class _Slot:
    """A worker process, and the call it runs (if any)."""

    def __init__(self, proc, requests, results, ready: bool):
        self.proc, self.requests, self.results = proc, requests, results
        self.ready = ready  # said ready; until then it is starting
        self.since = time.monotonic()  # its start, or its call's
        self.key: int | None = None
        self.stopped = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            _worker.stop(self.proc, self.requests, self.results)


def _death(proc) -> str:
    proc.join(1.0)  # it is gone or going: EOF came from its end of the pipe
    code = proc.exitcode
    if code is None:
        return "the environment worker died (it closed its pipe)"
    if code < 0:
        try:
            return f"the environment worker died (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f"the environment worker died (killed by signal {-code})"
    return f"the environment worker died (exit code {code})"


def _stop_all(slots: list[_Slot], server) -> None:
    for slot in slots:
        slot.stop()
    slots.clear()
    _worker.stop_server(server)


_OPEN: weakref.WeakSet = weakref.WeakSet()
atexit.register(lambda: [pool.close() for pool in list(_OPEN)])  # before multiprocessing's hook


class EnvironmentPool:
    """The environment of ``config`` in ``config.workers`` sandboxed processes; see the module."""

    def __init__(self, config: EnvironmentConfig, seed: int = 0, startup_timeout_s: float = 120.0):
        self.config = config
        self.timeout_s = float(config.timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.timeouts = self.crashes = self.restarts = 0
        self._build = (config, seed)
        self._queue: deque[tuple[int, float, bytes]] = deque()  # (key, submitted, request)
        self._done: deque[CallResult] = deque()
        self._slots: list[_Slot] = []
        preload = ["roles.rewards.server_signals", _worker.__name__, _pool_worker.__name__]
        if config.name in ENVIRONMENTS:
            preload.append(ENVIRONMENTS[config.name].partition(":")[0])
        self._server = _worker.new_server(preload)
        self._closer = weakref.finalize(self, _stop_all, self._slots, self._server)
        _OPEN.add(self)
        try:
            for _ in range(config.workers):
                self._slots.append(_Slot(*self._start_blocking(), ready=True))
            self._tools = self._ask_tools(self._slots[0])
        except BaseException:
            self.close()
            raise

    def _start_blocking(self):
        return _worker.start(
            self._server,
            self._build,
            self.startup_timeout_s,
            target=_pool_worker.serve,
            role="environment",
            built=f"the environment {self.config.name!r}",
            error=EnvironmentBuildError,
        )

    def _ask_tools(self, slot: _Slot) -> list[dict]:
        slot.requests.send_bytes(pickle.dumps(("tools", ()), pickle.HIGHEST_PROTOCOL))
        if not slot.results.poll(self.startup_timeout_s):
            raise EnvironmentBuildError(f"the environment's tools() took over {self.startup_timeout_s:g} s")
        try:
            kind, value = pickle.loads(slot.results.recv_bytes())
        except EOFError:
            raise EnvironmentBuildError(f"{_death(slot.proc)} in tools()") from None
        if kind != "ok":
            raise EnvironmentBuildError(f"the environment's tools() failed: {value}")
        return value

    # ------------------------------------------------------------------ the API

    def tools(self) -> list[dict]:
        """The environment's tool specs (asked once, of the first worker, at start)."""
        return [dict(spec) for spec in self._tools]

    def submit(self, key: int, call: str, args: tuple) -> None:
        """Queue ``call`` ("reset": (example, messages); "step": (state, turn); "final": (state,))."""
        if call not in CALLS:
            raise ValueError(f"call must be one of {', '.join(CALLS)}, got {call!r}")
        self._check_open()
        now = time.monotonic()
        try:
            request = pickle.dumps((call, tuple(args)), pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - an unpicklable state fails its call, not the rank
            self._done.append(CallResult(key, False, None, f"cannot send the {call}: {type(e).__name__}: {e}", 0.0))
            return
        self._queue.append((key, now, request))
        self._dispatch()

    def ready(self, timeout_s: float = 0.0) -> list[CallResult]:
        """The calls finished or failed since the last ``ready``; waits up to ``timeout_s`` for one."""
        self._check_open()
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            for i in range(len(self._slots)):
                self._check_slot(i)
            self._dispatch()
            now = time.monotonic()
            if self._done or now >= deadline:
                out = list(self._done)
                self._done.clear()
                return out
            watched = [s for s in self._slots if s.key is not None or not s.ready]
            limits = [deadline] + [s.since + (self.timeout_s if s.ready else self.startup_timeout_s) for s in watched]
            wait_s = max(0.0, min(limits) - now)
            if watched:
                connection.wait([s.results for s in watched], timeout=wait_s)
            else:
                time.sleep(wait_s)

    def pending(self) -> int:
        """Calls submitted and not yet handed back by ``ready`` (queued, running or finished)."""
        return len(self._queue) + sum(s.key is not None for s in self._slots) + len(self._done)

    @property
    def worker_pids(self) -> list[int]:
        return [s.proc.pid for s in self._slots]

    def close(self) -> None:
        """Kill the workers and their server. Safe to call twice; also at collection and exit."""
        self._closer()
        _OPEN.discard(self)

    def __enter__(self) -> EnvironmentPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ inside

    def _dispatch(self) -> None:
        for i, slot in enumerate(self._slots):
            if not self._queue:
                return
            if not slot.ready or slot.key is not None:
                continue
            key, _, request = self._queue.popleft()
            slot.key, slot.since = key, time.monotonic()
            try:
                slot.requests.send_bytes(request)
            except OSError:  # it died while idle: its call fails like any crash
                self._fail(i, _death(slot.proc), crashed=True)

    def _check_slot(self, i: int) -> None:
        slot = self._slots[i]
        now = time.monotonic()
        if not slot.ready:
            self._check_starting(slot, now)
        elif slot.key is not None:
            if slot.results.poll(0):
                self._collect(i)
            elif now >= slot.since + self.timeout_s:
                self.timeouts += 1
                self._fail(i, f"timed out after {self.timeout_s:g} s", crashed=False)
        elif not slot.proc.is_alive():  # died between calls (killed from outside)
            self._replace(i)

    def _collect(self, i: int) -> None:
        slot = self._slots[i]
        try:
            kind, value = pickle.loads(slot.results.recv_bytes())
        except (EOFError, OSError):
            self._fail(i, _death(slot.proc), crashed=True)
            return
        seconds = time.monotonic() - slot.since
        if kind == "ok":
            self._done.append(CallResult(slot.key, True, value, None, seconds))
        else:
            self._done.append(CallResult(slot.key, False, None, str(value), seconds))
        slot.key = None

    def _fail(self, i: int, error: str, crashed: bool) -> None:
        slot = self._slots[i]
        self.crashes += crashed
        seconds = time.monotonic() - slot.since
        self._done.append(CallResult(slot.key, False, None, error, seconds, timed_out=not crashed, crashed=crashed))
        slot.key = None
        self._replace(i)

    def _replace(self, i: int) -> None:
        """Kill the worker and start another in the background (``_check_starting`` awaits it)."""
        self._slots[i].stop()
        self._check_open()
        proc, requests, results = _worker.launch(
            self._server, _pool_worker.serve, (self._build,), "mpirl-environment-worker"
        )
        self._slots[i] = _Slot(proc, requests, results, ready=False)
        self.restarts += 1

    def _check_starting(self, slot: _Slot, now: float) -> None:
        """A replacement that fails to build the environment that its predecessor built is
        not retried: something outside changed (a file gone, memory short)."""
        if slot.results.poll(0):
            try:
                kind, message = slot.results.recv()
            except EOFError:
                raise EnvironmentBuildError(f"{_death(slot.proc)} while restarting") from None
            if kind != "ready":
                raise EnvironmentBuildError(f"cannot build the environment {self.config.name!r} again: {message}")
            slot.ready = True
        elif now >= slot.since + self.startup_timeout_s:
            raise EnvironmentBuildError(
                f"a restarted environment worker was not ready within {self.startup_timeout_s:g} s"
            )

    def _check_open(self) -> None:
        if not self._closer.alive:
            raise RuntimeError("the environment pool is closed")


__all__ = ["CallResult", "EnvironmentBuildError", "EnvironmentPool"]
