"""MPI tests: every rank runs the same pytest session under mpirun (pytest-mpi).

    mpirun -n 4 --oversubscribe .venv/bin/python -m pytest --with-mpi tests/mpi \\
        -p no:cacheprovider --timeout=120

Two things make that usable, and this file does both when ``--with-mpi`` is given:

- One report. Ranks > 0 write their pytest report to memory; only rank 0 prints. A rank
  > 0 whose session fails prints its whole report at the end, under a banner with its rank,
  so a failure seen by one rank alone is never hidden.
- A hang is a failure that ends the job. pytest-timeout's ``signal`` method cannot interrupt
  a rank blocked inside an MPI call, and its ``thread`` method ends only its own process
  (mpirun ends the job when a rank exits non-zero, but ``srun`` by default does not). So the
  timer here is a thread that, on expiry, prints the test, the rank and every thread's stack,
  then calls ``MPI_Abort`` on COMM_WORLD: every rank and the outer mpirun/srun end, non-zero.
  Every MPI test gets a timeout, ``DEFAULT_TIMEOUT_S`` if none is configured.

Tests should also bound their own waits (``Mailbox.wait(timeout_s=...)``, ``close(timeout_s=...)``)
so that a peer failing fast makes the others fail within seconds instead of at the timeout.
"""

from __future__ import annotations

import faulthandler
import io
import os
import sys
import threading

import pytest

DEFAULT_TIMEOUT_S = 120


def _with_mpi(config) -> bool:
    return bool(config.getoption("--with-mpi", False) or config.getoption("--only-mpi", False))


class _MPISession:
    """The per-rank state of an MPI pytest session (registered as a plugin)."""

    def __init__(self, config):
        from mpi4py import MPI

        self.MPI = MPI
        self.config = config
        self.rank = MPI.COMM_WORLD.Get_rank()
        self.size = MPI.COMM_WORLD.Get_size()
        self.buffer: io.StringIO | None = None
        self.failed = False
        if self.rank > 0:
            self._quiet_reporter()

    def _quiet_reporter(self) -> None:
        old = self.config.pluginmanager.get_plugin("terminalreporter")
        if old is None:  # -p no:terminal
            return
        self.config.pluginmanager.unregister(old)
        self.buffer = io.StringIO()
        self.config.pluginmanager.register(pytest.TerminalReporter(self.config, self.buffer), "terminalreporter")

    # ------------------------------------------------------------------ report

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed = True

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config):
        if self.buffer is not None and (self.failed or getattr(config, "_mpirl_exitstatus", 0)):
            self._emit_buffer()

    def pytest_sessionfinish(self, session, exitstatus):
        config = session.config
        config._mpirl_exitstatus = int(exitstatus)

    def _emit_buffer(self) -> None:
        text = self.buffer.getvalue()
        self.buffer = None
        banner = f" pytest report of MPI rank {self.rank} of {self.size} "
        sys.stderr.write(f"\n{banner:=^78}\n{text}\n{'':=^78}\n")
        sys.stderr.flush()

    # ----------------------------------------------------------------- timeout

    def pytest_report_header(self, config):
        return (
            f"MPI: {self.size} ranks; only rank 0 reports unless another fails; a test past its "
            "timeout prints its stacks and aborts the job (tests/mpi/conftest.py)"
        )

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_set_timer(self, item, settings):
        timer = threading.Timer(settings.timeout, self._timed_out, (item, settings.timeout))
        timer.name = f"mpi-timeout {item.nodeid}"
        timer.daemon = True

        def cancel():
            timer.cancel()

        item.cancel_timeout = cancel  # pytest-timeout's cancel hook calls this
        timer.start()
        return True  # firstresult: pytest-timeout's own timer is not set

    def _timed_out(self, item, timeout) -> None:
        out = err = ""
        capman = item.config.pluginmanager.getplugin("capturemanager")
        try:
            if capman is not None:
                capman.suspend_global_capture(item)
                out, err = capman.read_global_capture()
        except Exception:  # noqa: BLE001 - we are aborting anyway; report what we can
            pass
        stream = sys.stderr
        head = f"[rank {self.rank}] TIMEOUT: {item.nodeid} ran past {timeout} s; aborting the MPI job"
        parts = [f"\n{head}\n"]
        if out:
            parts.append(f"[rank {self.rank}] captured stdout:\n{out}\n")
        if err:
            parts.append(f"[rank {self.rank}] captured stderr:\n{err}\n")
        stream.write("".join(parts))
        stream.flush()
        try:
            faulthandler.dump_traceback(file=stream, all_threads=True)
        except Exception:  # noqa: BLE001 - stderr without a file descriptor
            pass
        if self.buffer is not None and self.failed:
            self._emit_buffer()
        stream.write(f"{head}\n")
        stream.flush()
        self.MPI.COMM_WORLD.Abort(1)
        os._exit(1)  # Abort does not return; in case an MPI lets it


@pytest.hookimpl(trylast=True)  # after the terminal reporter exists
def pytest_configure(config):
    if _with_mpi(config) and config.pluginmanager.get_plugin("mpirl-mpi-session") is None:
        config.pluginmanager.register(_MPISession(config), "mpirl-mpi-session")


def _timeout_configured(config) -> bool:
    return bool(config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT") or config.getini("timeout"))


def pytest_collection_modifyitems(config, items):
    if not _with_mpi(config) or _timeout_configured(config):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S))


@pytest.fixture
def comm():
    """A private duplicate of COMM_WORLD for one test (collective: every rank gets one).

    Traffic of a test that failed half-way stays on its own communicator and cannot be
    taken by the next test.
    """
    from mpi4py import MPI

    c = MPI.COMM_WORLD.Dup()
    yield c
    c.Free()


@pytest.fixture
def open_mailbox(comm):
    """``open_mailbox(roles, max_inflight_bytes=...) -> Mailbox`` on the test's communicator.

    Collective, like the Mailbox itself. Every mailbox opened is closed at teardown, on every
    rank, even when the test failed half-way on some: peers are then not left waiting in
    their own close() for a rank that will never come.
    """
    from runtime import Mailbox, RoleTable

    opened = []

    def open_(roles: list[str], **kwargs) -> Mailbox:
        mb = Mailbox(RoleTable(comm, roles), **kwargs)
        opened.append(mb)
        return mb

    yield open_
    for mb in opened:
        mb.close(timeout_s=30.0)
