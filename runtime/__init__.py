"""The actor runtime on MPI: meshes of roles, mailboxes, actors, shutdown and abort.

Nothing here knows about reinforcement learning; any MPI program made of role-playing
ranks that exchange messages can use it.
"""

from runtime.actor import Actor, handles
from runtime.failure import abort_on_error
from runtime.mailbox import Address, Envelope, Mailbox
from runtime.mesh import Mesh
from runtime.messages import Stop

__all__ = ["Actor", "handles", "abort_on_error", "Address", "Envelope", "Mailbox", "Mesh", "Stop"]
