"""One reward worker process: how it starts, what it runs, and how it dies with its rank.

Workers are forked by a fork server of their own (one per sandbox): a process exec'ed fresh
from the rank (no MPI state, no threads) that imports the reward modules once (``preload``),
so a restart costs a fork. A worker builds the rewards from component specs (plain data),
says ``ready`` (or why not), then answers batches of pickled ``(response, example)`` pairs,
one result per item, in order, until its request pipe closes. The same machinery starts
workers of another target (``launch``, ``start(target=...)``, ``detach_from_rank``): the
environment workers of ``roles.environments.pool``.

Departures from multiprocessing's defaults, each for an MPI job: a worker does not re-run the
parent's ``__main__``; it dies with the rank even while stuck in C code (liveness pipe and
PR_SET_PDEATHSIG); it ignores SIGINT, SIGTERM and SIGUSR1, as its server does
(``roles.rewards.server_signals``); and it drops the MPI launcher's environment. These lean on
multiprocessing's internals as of Python 3.11 (``popen_forkserver.Popen._launch``,
``forkserver.ForkServer``). Not known here: time limits, restarts and scheduling
(``roles.rewards.sandbox``).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import time
import traceback
from multiprocessing import forkserver, get_context, popen_forkserver, spawn, util
from multiprocessing.context import reduction, set_spawning_popen

from roles.rewards.combine import CombinedReward

CONTEXT = get_context("forkserver")


class RewardBuildError(RuntimeError):
    """A worker could not build the rewards, or did not start; the message says why."""


class ServerStopped(RuntimeError):
    """A worker was asked of a fork server that ``stop_server`` has stopped."""


class _SandboxServer(forkserver.ForkServer):
    """A fork server that stays down once stopped.

    multiprocessing's would start a fresh server on the next request: a scoring thread
    still running while the rank exits would then start a worker that ignores SIGTERM,
    and multiprocessing's exit hook would wait for that worker forever.
    """

    def __init__(self):
        super().__init__()
        self.stopped = False

    def ensure_running(self):
        with self._lock:
            if self.stopped:
                raise ServerStopped("the reward workers' fork server is stopped")
        super().ensure_running()


def new_server(preload: list[str]) -> forkserver.ForkServer:
    """A fork server (started on first use) that imports ``preload`` ahead."""
    server = _SandboxServer()
    server.set_forkserver_preload(list(preload))  # without "__main__": see the docstring
    return server


def stop_server(server: forkserver.ForkServer, timeout_s: float = 5.0) -> None:
    """Close our end of the server's liveness pipe (it exits on that), and reap it.

    Its workers die with it (see ``_die_with_rank``), and it starts no new ones. A server
    that has not exited within ``timeout_s`` (stopped, say) is killed: closing never waits
    without a bound.
    """
    with server._lock:
        server.stopped = True
        pid, alive_fd = server._forkserver_pid, server._forkserver_alive_fd
        address = server._forkserver_address
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None
    if pid is None:
        return
    os.close(alive_fd)
    if address and not util.is_abstract_socket_namespace(address):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)  # a socket file (not Linux)
    deadline = time.monotonic() + timeout_s
    try:
        while os.waitpid(pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.005)
    except ChildProcessError:  # already reaped
        pass


class _Popen(popen_forkserver.Popen):
    """multiprocessing's fork-server launch (Python 3.11), with our server and no ``__main__``."""

    def _launch(self, process_obj):
        prep_data = spawn.get_preparation_data(process_obj._name)
        # The target lives in this module and its arguments are plain data: nothing is
        # needed from __main__.
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = process_obj.server.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class WorkerProcess(CONTEXT.Process):
    def __init__(self, server: forkserver.ForkServer, **kwargs):
        super().__init__(**kwargs)
        self.server = server

    def __getstate__(self):  # the server (a lock, our pipe ends) stays with the rank
        return {k: v for k, v in self.__dict__.items() if k != "server"}

    @staticmethod
    def _Popen(process_obj):
        return _Popen(process_obj)


def _die_with_rank() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the request pipe's EOF still ends idle workers
        return
    if os.getppid() == 1:  # the server was gone before the request took hold
        os._exit(0)
    server = forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None


def detach_from_rank() -> None:
    """What every worker does first, whatever it runs: die with the rank, leave the stop
    signals to it, and drop the MPI launcher's environment."""
    _die_with_rank()
    # Stop signals are the rank's to act on (it finishes the step, then closes us); they reach
    # workers too (process group, Open MPI's forwarding, Slurm's --signal).
    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(stop_signal, signal.SIG_IGN)
    # Not an MPI process: a library that initialises MPI inside a reward must not try to
    # join the job as a second copy of this rank.
    for key in [k for k in os.environ if k.startswith(("OMPI_", "PMIX_", "PMI_"))]:
        del os.environ[key]


def serve(specs, requests, results) -> None:
    """The worker's main: build ``CombinedReward(specs)``, then score requests until EOF."""
    detach_from_rank()
    try:
        reward = CombinedReward(specs)
    except BaseException as e:  # noqa: BLE001 - the parent raises it as RewardBuildError
        results.send(("error", "".join(traceback.format_exception_only(e)).strip()))
        return
    results.send(("ready", None))
    while True:
        try:
            batch = pickle.loads(requests.recv_bytes())  # a list of pickled items
        except EOFError:  # the rank closed the pipe, or died
            return
        for data in batch:
            try:
                s = reward(*pickle.loads(data))
                out = (s.score, s.components, s.failures)
            except Exception:  # noqa: BLE001 - an item that cannot even be unpickled fails alone
                traceback.print_exc()
                out = (0.0, {}, 1)
            # At once, item by item: the rank times each item from its predecessor's result.
            results.send_bytes(pickle.dumps(out, pickle.HIGHEST_PROTOCOL))


def pipe_capacity(conn) -> int:
    """Bytes the pipe under ``conn`` buffers, after asking Linux for 1 MiB."""
    try:
        import fcntl

        try:
            fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass  # over the user's pipe allowance: keep the size it has
        return fcntl.fcntl(conn.fileno(), fcntl.F_GETPIPE_SZ)
    except (ImportError, AttributeError, OSError):
        return 4096  # not Linux: the smallest pipe buffer of any Unix mpirl runs on


def launch(server: forkserver.ForkServer, target, args: tuple, name: str):
    """A worker running ``target(*args, requests, results)``, and the rank's ends of those two
    pipes ``(process, requests, results)``; it is not waited for (``start`` waits)."""
    req_r, requests = CONTEXT.Pipe(duplex=False)
    results, res_w = CONTEXT.Pipe(duplex=False)
    proc = WorkerProcess(server, target=target, args=(*args, req_r, res_w), daemon=True, name=name)
    try:
        proc.start()
    except BaseException:
        requests.close()
        results.close()
        raise
    finally:
        req_r.close()
        res_w.close()  # so that the worker's death reads as EOF here
    return proc, requests, results


def start(
    server: forkserver.ForkServer,
    specs,
    startup_timeout_s: float,
    *,
    target=serve,
    role: str = "reward",
    built: str = "the rewards",
    error: type[Exception] = RewardBuildError,
):
    """A started worker and its two pipes ``(process, requests, results)``, once it is ready.

    The worker runs ``target(specs, requests, results)`` (``serve`` by default), which sends
    ``("ready", None)`` or ``("error", message)`` first. Raises ``error`` (RewardBuildError)
    with the worker's message when it cannot build ``built``, exits while building, or is not
    ready within ``startup_timeout_s``; ``role`` words the messages.
    """
    proc, requests, results = launch(server, target, (specs,), f"mpirl-{role}-worker")
    problem = None
    if not results.poll(startup_timeout_s):
        problem = f"the {role} worker was not ready within {startup_timeout_s:g} s"
    else:
        try:
            kind, message = results.recv()
            if kind != "ready":
                problem = f"cannot build {built}: {message}"
        except EOFError:
            proc.join(5.0)
            problem = f"the {role} worker exited (code {proc.exitcode}) while building {built}"
    if problem is not None:
        stop(proc, requests, results)
        raise error(problem)
    return proc, requests, results


def stop(proc, requests, results) -> None:
    """SIGKILL the worker (if it still runs) and close its pipes."""
    if proc.pid is not None and proc.exitcode is None:
        proc.kill()
        proc.join(5.0)  # SIGKILL cannot be refused; 5 s only bounds a stuck kernel
    requests.close()
    results.close()
