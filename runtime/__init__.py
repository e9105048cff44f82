"""The actor runtime on MPI: a role table, mailboxes, actors, shutdown and abort.

Nothing here knows about reinforcement learning; any MPI program made of role-playing
ranks that exchange messages can use it.

The names below are imported on first use (PEP 562), so that a module of this package that
needs no MPI (``runtime.loop_clock``, which the engines, the checkpoint writer and the reward
sandbox tick) can be imported without initialising MPI.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "Actor": "runtime.actor",
    "handles": "runtime.actor",
    "Backoff": "runtime.backoff",
    "abort_on_error": "runtime.failure",
    "Address": "runtime.mailbox",
    "Envelope": "runtime.mailbox",
    "Mailbox": "runtime.mailbox",
    "Stop": "runtime.messages",
    "EXIT_RESUMABLE": "runtime.preemption",
    "PREEMPTED": "runtime.preemption",
    "PREEMPTION": "runtime.preemption",
    "RoleTable": "runtime.role_table",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
