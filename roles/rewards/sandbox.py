"""Running rewards in worker processes, so that a time limit holds whatever a reward does.

A reward rank is an MPI process with background threads: it must not fork, and a thread or
a signal cannot stop code that never returns to the interpreter (a sleep in a C extension,
a sympy hang, a busy loop on another thread) or survive a segfault. So the rewards run in
worker processes started by multiprocessing's fork server, which is exec'ed fresh (no MPI
state, no threads) and has the reward modules imported ahead, so a restart costs a fork.
Workers get component specs, never callables, and build the rewards themselves; a build
that fails (bad options, an import error) is raised in the parent by the constructor.

``score(items)`` pipelines a call's items into the workers and reads results one by one,
each with its own deadline (``timeout_s`` from when the worker began it). An item past its
deadline is cut: its worker is killed (SIGKILL), the item scores 0 (``timed_out``), and a
fresh worker takes the items that were queued behind it. A worker that dies (crash,
segfault, ``os._exit``) costs the item it was scoring one failure, and is restarted. Every
wait has a deadline; sends never block, because a worker never holds more unread bytes
than its request pipe can buffer.

Workers die with their process server (PR_SET_PDEATHSIG), which exits with this process, so
a reward stuck in a loop does not outlive the job; they ignore SIGINT, which the rank owns.
Unlike multiprocessing's default, a worker does not re-run the parent's ``__main__`` script
(the script of an MPI job would initialise MPI again in it). Not known here: what a reward
computes (``roles.rewards.combine``), and how results reach the metrics.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import time
import traceback
import weakref
from collections import deque
from dataclasses import dataclass
from multiprocessing import connection, forkserver, get_context, popen_forkserver, spawn, util
from multiprocessing.context import reduction, set_spawning_popen
from typing import Any, Sequence

from roles.rewards import REWARDS, reward_object
from roles.rewards.combine import CombinedReward, ComponentSpec, check_labels

_CTX = get_context("forkserver")
MAX_IN_FLIGHT = 8  # items queued in one worker: enough to hide the round trip, small enough to balance


@dataclass
class SampleResult:
    score: float  # weighted sum of the components; 0 when timed out or the worker died
    components: dict[str, float]  # as roles.rewards.combine.SampleScore
    failures: int = 0  # failed components; 1 when the worker died scoring this item
    timed_out: bool = False  # cut at the time limit


class RewardBuildError(RuntimeError):
    """The workers could not build the rewards, or did not start; the message says why."""


class _Popen(popen_forkserver.Popen):
    """multiprocessing's fork-server launch, minus re-running the parent's ``__main__``."""

    def _launch(self, process_obj):  # the standard library's, with prep_data trimmed
        prep_data = spawn.get_preparation_data(process_obj._name)
        # The worker's target lives in this module and its arguments are plain data, so
        # it needs nothing from __main__; an MPI script's top level must not run again.
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(_CTX.Process):
    @staticmethod
    def _Popen(process_obj):
        return _Popen(process_obj)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent (the fork server) exits."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the request pipe's EOF still ends idle workers
        return
    if os.getppid() == 1:  # the server was already gone before the request took hold
        os._exit(0)


def _worker_main(specs, requests, results) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        reward = CombinedReward(specs)
    except BaseException as e:  # noqa: BLE001 - the parent raises it as RewardBuildError
        results.send(("error", "".join(traceback.format_exception_only(e)).strip()))
        return
    results.send(("ready", None))
    while True:
        try:
            data = requests.recv_bytes()
        except EOFError:  # the parent closed the pipe, or died
            return
        try:
            s = reward(*pickle.loads(data))
            out = (s.score, s.components, s.failures)
        except Exception:  # noqa: BLE001 - an item that cannot even be unpickled fails alone
            traceback.print_exc()
            out = (0.0, {}, 1)
        results.send_bytes(pickle.dumps(out, pickle.HIGHEST_PROTOCOL))


def _pipe_capacity(conn) -> int:
    """Bytes the pipe buffers (asking Linux for 1 MiB first), so that sends never block."""
    fcntl_mod = None
    try:
        import fcntl as fcntl_mod

        fcntl_mod.fcntl(conn.fileno(), fcntl_mod.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass  # not Linux, or over the user's pipe limit: keep what there is
    try:
        return fcntl_mod.fcntl(conn.fileno(), fcntl_mod.F_GETPIPE_SZ)
    except (AttributeError, OSError):
        return 4096  # the smallest pipe buffer of any Unix mpirl runs on


class _Worker:
    """One worker process, its two pipes, and the items it holds, oldest first."""

    def __init__(self, specs, startup_timeout_s: float):
        req_r, self.requests = _CTX.Pipe(duplex=False)
        self.results, res_w = _CTX.Pipe(duplex=False)
        # Unread requests stay under half the buffer; the 4-byte frame headers fit in the rest.
        self.window = _pipe_capacity(self.requests) // 2
        self.proc = _Process(target=_worker_main, args=(specs, req_r, res_w), daemon=True,
                             name="mpirl-reward-worker")
        try:
            self.proc.start()
        finally:
            req_r.close()
            res_w.close()  # so that the worker's death reads as EOF here
        self.held: deque[tuple[int, int]] = deque()  # (item index, request bytes)
        self.held_bytes = 0
        self.head_since = 0.0  # when the worker began the oldest item it holds
        self._await_ready(startup_timeout_s)

    def _await_ready(self, timeout_s: float) -> None:
        if not self.results.poll(timeout_s):
            self.kill()
            raise RewardBuildError(f"the reward worker did not start within {timeout_s:g} s")
        try:
            kind, message = self.results.recv()
        except EOFError:
            self.kill()
            raise RewardBuildError(f"the reward worker exited (code {self.proc.exitcode}) "
                                   "while building the rewards") from None
        if kind != "ready":
            self.kill()
            raise RewardBuildError(f"cannot build the rewards: {message}")

    def can_take(self, nbytes: int) -> bool:
        # An item larger than the window goes alone: the worker is idle in recv, reading it.
        return not self.held or (len(self.held) < MAX_IN_FLIGHT and self.held_bytes + nbytes <= self.window)

    def send(self, index: int, payload: bytes) -> None:
        if not self.held:
            self.head_since = time.monotonic()
        self.held.append((index, len(payload)))
        self.held_bytes += len(payload)
        self.requests.send_bytes(payload)

    def pop_head(self) -> int:
        index, nbytes = self.held.popleft()
        self.held_bytes -= nbytes
        self.head_since = time.monotonic()
        return index

    def kill(self) -> None:
        if self.proc.pid is not None and self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join(5.0)  # SIGKILL is not refused; 5 s only bounds a stuck kernel
        self.requests.close()
        self.results.close()


def _kill_all(workers: list[_Worker]) -> None:
    for w in workers:
        w.kill()
    workers.clear()


def _preload_modules(specs: Sequence[ComponentSpec]) -> list[str]:
    """Modules the fork server imports ahead: this one, built-in rewards and what they declare.

    User modules are left to the workers: the server dies on any import error but ImportError.
    """
    mods = [__name__]
    for spec in specs:
        if spec.name in REWARDS:
            mods.append(REWARDS[spec.name].partition(":")[0])
            mods.extend(getattr(reward_object(spec.name), "preload", ()))
    return list(dict.fromkeys(mods))


class RewardSandbox:
    """``CombinedReward(specs)`` in ``workers`` processes, each item bounded by ``timeout_s``.

    The fork server is one per process: its preloaded modules are those of the first
    sandbox made (a later one with other rewards works, its workers import them when built).
    """

    def __init__(self, specs: Sequence[ComponentSpec], timeout_s: float, workers: int = 1,
                 startup_timeout_s: float = 120.0):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers!r}")
        check_labels(specs)
        self.specs = tuple(specs)
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.failures = self.timeouts = self.restarts = 0
        self._zero = {**{s.label: 0.0 for s in self.specs}, "correct": 0.0}
        self._workers: list[_Worker] = []
        self._closer = weakref.finalize(self, _kill_all, self._workers)  # also runs at exit
        _CTX.set_forkserver_preload(_preload_modules(self.specs))
        try:
            for _ in range(workers):
                self._workers.append(_Worker(self.specs, self.startup_timeout_s))
        except BaseException:
            self.close()
            raise

    def score(self, items: Sequence[tuple[str, Any]]) -> list[SampleResult]:
        """Scores of ``(response_text, example)`` pairs, in order."""
        if self._closer.alive is False:
            raise RuntimeError("the reward sandbox is closed")
        payloads = [pickle.dumps(tuple(item), pickle.HIGHEST_PROTOCOL) for item in items]
        out: list[SampleResult | None] = [None] * len(items)
        pending = deque(range(len(items)))
        for i, w in enumerate(self._workers):
            if not w.proc.is_alive():  # died between calls (killed from outside)
                self._replace(i, [])
        while pending or any(w.held for w in self._workers):
            self._dispatch(pending, payloads, out)
            busy = [w for w in self._workers if w.held]
            deadline = min(w.head_since for w in busy) + self.timeout_s
            connection.wait([w.results for w in busy], timeout=max(0.0, deadline - time.monotonic()))
            for w in busy:
                self._collect(w, pending, out)
        return out  # type: ignore[return-value]

    def _dispatch(self, pending: deque, payloads: list[bytes], out: list) -> None:
        for i in range(len(self._workers)):
            while pending and self._workers[i].can_take(len(payloads[pending[0]])):
                index = pending.popleft()
                try:
                    self._workers[i].send(index, payloads[index])
                except OSError:  # the worker died: it loses its oldest item, like any crash
                    self._crashed(i, pending, out)

    def _collect(self, w: _Worker, pending: deque, out: list) -> None:
        i = self._workers.index(w)
        while w.held and w.results.poll(0):
            try:
                score, components, failures = pickle.loads(w.results.recv_bytes())
            except (EOFError, OSError):
                self._crashed(i, pending, out)
                return
            self.failures += failures
            out[w.pop_head()] = SampleResult(score, components, failures)
        if w.held and time.monotonic() >= w.head_since + self.timeout_s:
            self.timeouts += 1
            index = w.held[0][0]
            out[index] = SampleResult(0.0, dict(self._zero), 0, timed_out=True)
            self._requeue(self._replace(i, list(w.held)[1:]), pending)

    def _crashed(self, i: int, pending: deque, out: list) -> None:
        held = list(self._workers[i].held)
        if held:
            self.failures += 1
            out[held[0][0]] = SampleResult(0.0, dict(self._zero), 1)
        self._requeue(self._replace(i, held[1:]), pending)

    def _replace(self, i: int, held: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Kills worker ``i`` and starts a fresh one; returns the items to send again."""
        self._workers[i].kill()
        self._workers[i] = _Worker(self.specs, self.startup_timeout_s)
        self.restarts += 1
        return held

    @staticmethod
    def _requeue(held: list[tuple[int, int]], pending: deque) -> None:
        pending.extendleft(index for index, _ in reversed(held))

    def close(self) -> None:
        """Kills the workers; safe to call twice, and run on garbage collection and at exit."""
        self._closer()

    def __enter__(self) -> RewardSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
