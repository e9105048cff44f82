"""A mailbox with no messages, ever: what an actor's loop asks of one, for running an actor
(runtime.Actor) in a unit test without MPI."""

from __future__ import annotations

from types import SimpleNamespace


class QuietMailbox:
    def __init__(self, rank: int = 0, role: str = "controller", index: int = 0):
        self.role_table = SimpleNamespace(rank=rank, role=role, index=index)
        self.address = f"rank {rank}"

    def poll(self):
        return None

    def progress(self):
        pass

    def close(self):
        pass
