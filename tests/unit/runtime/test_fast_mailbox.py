"""A mailbox on the compiled transport takes runtime/fast_mailbox.pyx's send and poll as its own.

Without this, a fast_mailbox module that failed to load would pass unseen: the mailbox's own
Python send and poll do the same, only slower. Skipped where the compiled modules are not built.
"""

from __future__ import annotations

import pytest
from mpi4py import MPI

from runtime import Mailbox, RoleTable, Stop
from transports import choose


def test_a_mailbox_on_the_compiled_transport_sends_and_polls_in_c(monkeypatch):
    choose.compiled_transport.cache_clear()
    if isinstance(found := choose.compiled_transport(), str):
        pytest.skip(f"the compiled transport is {found}")
    monkeypatch.setenv(choose.ENV, "compiled")
    mb = Mailbox(RoleTable(MPI.COMM_SELF, ["solo"]))
    try:
        from runtime.fast_mailbox import MailboxPath  # from the build's folder, once a mailbox exposed it

        assert type(mb.send.__self__) is MailboxPath and mb.poll.__self__ is mb.send.__self__
        mb.send(("solo", 0), Stop("bye"))
        env = mb.wait(timeout_s=10)
        assert env.msg == Stop("bye") and env.sender == mb.address
    finally:
        mb.close(timeout_s=10)
        mb.comm.Free()
