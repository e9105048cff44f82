"""Failure semantics: an exception on any rank aborts the whole job within seconds.

A rank that dies alone would leave its peers waiting forever on messages it will never
send. So the exception is logged with the rank, its role and the traceback, and then
``MPI_Abort`` tears the whole job down: ``mpirun`` exits non-zero instead of hanging.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import termios
import time
import traceback

from mpi4py import MPI


def report_and_abort(role: str, exc: BaseException, comm: MPI.Comm = MPI.COMM_WORLD, code: int = 1) -> None:
    rank = MPI.COMM_WORLD.Get_rank()
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    # One write of the whole report so lines of different ranks do not interleave.
    sys.stderr.write(
        f"[mpirl] rank {rank} ({role}) failed with {type(exc).__name__}: {exc}\n{text}"
        f"[mpirl] rank {rank} ({role}) aborting the job\n"
    )
    sys.stderr.flush()
    sys.stdout.flush()
    wait_until_output_is_read()
    comm.Abort(code)
    os._exit(code)  # Abort does not return; this guards against an MPI that lets it


def wait_until_output_is_read(timeout_s: float = 2.0) -> None:
    """Wait (up to ``timeout_s``) until the launcher has read what this rank wrote to its
    stdout and stderr pipes. MPICH's hydra forwards output and the abort on one socket, in the
    order it read them, and an abort read first can drop the report (docs/log.md)."""
    deadline = time.monotonic() + timeout_s
    for fd in (2, 1):
        while _unread_bytes(fd) and time.monotonic() < deadline:
            time.sleep(0.01)


def _unread_bytes(fd: int) -> int:
    """Bytes written to ``fd`` that its reader has not taken: a pipe's content; 0 for a file,
    a terminal or anything that cannot say."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return 0
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)
    except OSError:
        return 0


@contextlib.contextmanager
def abort_on_error(role: str, comm: MPI.Comm = MPI.COMM_WORLD):
    """Run the block; on any exception (Ctrl-C included) log it and abort the whole job."""
    try:
        yield
    except SystemExit as e:
        if e.code not in (0, None):
            report_and_abort(role, e, comm, code=e.code if isinstance(e.code, int) else 1)
        raise
    except BaseException as e:  # noqa: BLE001 - any escape must take the job down
        report_and_abort(role, e, comm)
