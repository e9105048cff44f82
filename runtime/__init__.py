"""The actor runtime on MPI: a role table, mailboxes, actors, shutdown and abort.

What it holds: ``role_table`` (which rank plays which role), ``mailbox`` (typed messages
between roles over the transports, with its compiled send and poll in ``fast_mailbox.pyx``),
``actor`` (handlers and a step in one event loop, with ``backoff``), and how a job of such
ranks ends: ``failure`` (an exception aborts the job), ``liveness`` and ``lifeline`` (a silent
rank or a lost launcher ends it), ``preemption`` (a signal stops it at a safe point), ``faults``
(injected failures for the tests), plus ``spans`` and ``loop_clock`` (what each rank did, when).

Nothing here knows about reinforcement learning, rollouts, the roles of an RL job or model
families; any MPI program made of role-playing ranks that exchange messages can use it. It
builds on transports/ and never imports roles/ or launch/.

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
