"""Leave a rank that finished without Python's interpreter teardown.

A rank with torch and transformers loaded spends seconds in the interpreter's teardown, freeing
every module and object after everything that matters is done. So a rank that returns normally
ends like this: the usual ``sys.exit`` path runs (non-daemon
threads are joined, every ``atexit`` handler runs: dashboards, reward workers,
multiprocessing), then this module's handler, which runs last, flushes standard output and
error, finalizes MPI and calls ``os._exit`` with the rank's exit code. What is skipped is only
freeing memory the process is about to lose anyway.

A rank that fails is not affected: an uncaught exception leaves without an exit code set
here, so Python ends the process as usual (and a failure inside a role aborts the job through
``runtime.failure`` long before).
"""

from __future__ import annotations

import atexit
import os
import sys

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
    except ImportError:
        pass
    os._exit(code)
