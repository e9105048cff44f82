"""Leave a rank that finished without Python's interpreter teardown.

A rank with torch loaded spends seconds freeing every module and object after everything that
matters is done. So a rank that returns normally runs the usual ``sys.exit`` path (threads
joined, every ``atexit`` handler), then this module's handler, which runs last: it flushes
stdout and stderr, finalizes MPI and calls ``os._exit`` with the rank's exit code. A rank that
fails is not affected: an uncaught exception sets no exit code here.

Under MPICH's ``mpiexec`` (hydra) one more step is needed: MPICH ends its process-manager
connection (PMI's ``finalize``) in a C ``atexit`` handler, which ``os._exit`` skips, and hydra
takes an exit without it for a crash: it SIGKILLs the ranks still on their way out (the job
ends with code 9). So the rank sends that ``finalize`` itself (:func:`finish_hydra_pmi`).
"""

from __future__ import annotations

import atexit
import os
import select
import sys
import time

_code: int | None = None


def install() -> None:
    """Call first thing in the process: ``atexit`` runs handlers last-registered first, so the
    earliest one runs after every other."""
    atexit.register(_leave)


def exit_now(code: int) -> None:
    """``sys.exit(code)``, then (after the atexit handlers) straight out of the process."""
    global _code
    _code = int(code)
    sys.exit(code)


def _leave() -> None:
    if _code is None:  # not a normal return (an exception, or not launched through launch/)
        return
    leave(_code)


def leave(code: int) -> None:
    """Out of the process at once: standard streams flushed, MPI finalized, no atexit handler
    and no teardown (the last step of a normal exit, or all of an exit that must skip the rest)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced: nothing left to write
            pass
    try:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()  # what mpi4py would do at exit; os._exit skips its Py_AtExit hook
            finish_hydra_pmi()
    except ImportError:
        pass
    os._exit(code)


def finish_hydra_pmi(environ=os.environ, timeout_s: float = 5.0) -> bool:
    """Under hydra (``PMI_FD`` and ``HYDI_CONTROL_FD`` set), send PMI-1's ``cmd=finalize`` on
    the rank's PMI socket and wait for the proxy's ``finalize_ack``, as MPICH's own exit handler
    would. Whether the ack came; never raises (a rank on its way out has nothing to do about it)."""
    if "PMI_FD" not in environ or "HYDI_CONTROL_FD" not in environ:
        return False
    try:
        fd = int(environ["PMI_FD"])
        os.write(fd, b"cmd=finalize\n")
        reply, deadline = b"", time.monotonic() + timeout_s
        while b"\n" not in reply:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return False
            chunk = os.read(fd, 256)
            if not chunk:
                return False
            reply += chunk
    except (OSError, ValueError):
        return False
    return reply.startswith(b"cmd=finalize_ack")
