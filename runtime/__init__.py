"""The actor runtime on MPI: a role table, mailboxes, actors, shutdown and abort.

Nothing here knows about reinforcement learning; any MPI program made of role-playing
ranks that exchange messages can use it.
"""

from runtime.actor import Actor, handles
from runtime.backoff import Backoff
from runtime.failure import abort_on_error
from runtime.mailbox import Address, Envelope, Mailbox
from runtime.messages import Stop
from runtime.preemption import EXIT_RESUMABLE, PREEMPTED, PREEMPTION
from runtime.role_table import RoleTable

__all__ = [
    "EXIT_RESUMABLE",
    "PREEMPTED",
    "PREEMPTION",
    "Actor",
    "handles",
    "abort_on_error",
    "Address",
    "Backoff",
    "Envelope",
    "Mailbox",
    "RoleTable",
    "Stop",
]
