"""Injected faults: the failure tests' hook, read from ``MPIRL_INJECT_FAULT=WHERE:AT``.

A test sets the variable for a whole job; each place that may fail asks whether it is the
one named (``fault_injected``), on every rank that gets there. The places:

- ``trainer-saved:V`` (``roles.checkpoint.trainer_state``): a crash after the trainers wrote checkpoint V;
- ``nan-loss:S`` (``roles.trainer``): the loss of step S is NaN;
- ``raise-ROLE:N``, ``kill-ROLE:N`` and ``hang-ROLE:N`` (:func:`actor_fault`): a rank of ROLE
  raises, is killed with SIGKILL, or deadlocks its loop, as it handles its N-th message.

Unset (as in every real run) it costs one dictionary lookup per question.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

ENV = "MPIRL_INJECT_FAULT"


def fault_injected(where: str, at: int) -> bool:
    """Whether ``MPIRL_INJECT_FAULT`` asks for the fault ``where`` at ``at`` (a step, a count)."""
    return os.environ.get(ENV) == f"{where}:{at}"


def actor_fault(role: str, handled: int) -> None:
    """The fault asked of a ``role`` rank as it handles its ``handled``-th message, if any.

    It first prints one line (so a test can time what follows from the moment of the fault).
    """
    for kind in ("raise", "kill", "hang"):
        if fault_injected(f"{kind}-{role}", handled):
            print(f"mpirl: fault injected: {kind} in the {role} at its message {handled}", file=sys.stderr, flush=True)
            if kind == "raise":
                raise RuntimeError(f"fault injected in the {role} at its message {handled} ({ENV})")
            if kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            threading.Event().wait()  # a deadlock: the loop blocks for good, the process lives on
