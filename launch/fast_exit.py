"""Leave a rank that finished without Python's interpreter teardown.

A rank with torch loaded spends seconds freeing every module and object after everything that
matters is done. So a rank that returns normally runs the usual ``sys.exit`` path (threads
joined, every ``atexit`` handler), then this module's handler, which runs last: it flushes
stdout and stderr, finalizes MPI and calls ``os._exit`` with the rank's exit code. A rank that
fails is not affected: an uncaught exception sets no exit code here.
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
