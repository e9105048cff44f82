"""Mailboxes: typed messages between role-addressed ranks, sent asynchronously over MPI.

A mailbox encodes messages with the msgpack codec and moves them with the MPI transport
on its own duplicate of the role table's communicator (so its tags never meet those of other
MPI traffic). Large arrays travel as separate raw buffers, without a copy into the header.

Small messages to a peer that has not yet taken our previous one are coalesced into one MPI
message (see transports/mpi_transport.py); such a message goes out at the latest at this
rank's next :meth:`Mailbox.progress`, :meth:`Mailbox.poll` that finds nothing,
:meth:`Mailbox.wait`, :meth:`Mailbox.flush` or :meth:`Mailbox.close`. An actor's loop calls
these all the time; code that sends and then computes for long without them should call
``progress()`` after sending.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Iterable
from itertools import repeat
from typing import Any, NamedTuple

from runtime.backoff import Backoff
from runtime.role_table import RoleTable
from transports import codec
from transports.choose import transport_class


class Address(NamedTuple):
    role: str
    index: int = 0

    def __str__(self) -> str:
        return f"{self.role} {self.index}"


class Envelope(NamedTuple):
    """A received message and who sent it."""

    sender: Address
    msg: Any


_tuple_new = tuple.__new__  # builds an Envelope without the Python frame of its __new__


def _compiled_path(transport):
    """The compiled MailboxPath class for a compiled transport; None for the Python one, or where
    runtime/fast_mailbox.pyx does not load (the mailbox's own send and poll then do the same)."""
    compiled = sys.modules.get("transports.fast_transport")  # loaded if the transport is compiled
    if compiled is None or not isinstance(transport, compiled.FastTransport):
        return None
    import runtime
    from transports.choose import build_folder, expose

    expose(build_folder(compiled.BUILT_FOR), runtime)  # built with the transport, in its folder
    try:
        from runtime.fast_mailbox import MailboxPath
    except ImportError:
        return None
    return MailboxPath


class Mailbox:
    def __init__(self, role_table: RoleTable, max_inflight_bytes: int = 256 * 1024 * 1024):
        """Collective over the role table's communicator (it is duplicated)."""
        self.role_table = role_table
        self.comm = role_table.comm.Dup()
        self.transport = transport_class()(self.comm, max_inflight_bytes=max_inflight_bytes)
        self._ready: collections.deque[Envelope] = collections.deque()  # decoded, not yet polled
        self.address = Address(role_table.role, role_table.index)
        # Looked up on every message: worked out once.
        self._senders = [Address(*role_table.whois(r)) for r in range(self.comm.Get_size())]
        self._ranks: dict[tuple, int] = {}
        compiled = _compiled_path(self.transport)
        if compiled is not None:
            # On the compiled transport, send() and poll() are compiled too (runtime/fast_mailbox.pyx),
            # the same lines over the same state: an instance attribute wins over the method, so
            # every caller (wait, drain, actors) gets them. Their Python frames were a third of a
            # small message's round trip (bench/mailbox_parts.py).
            path = compiled(self.transport, self._ready, self._senders, self._ranks, role_table.rank_of, Envelope)
            self.send, self.poll, self.progress = path.send, path.poll, self.transport.progress
        self.closed = False
        self.dropped_after_close = 0  # messages that arrived after close(): a protocol smell

    # ------------------------------------------------------------------ sending

    def send(self, to: Address | tuple[str, int], msg) -> None:
        """Queue ``msg`` for one actor; non-blocking unless back-pressure applies."""
        rank = self._ranks.get(to)
        if rank is None:
            role, index = to
            rank = self._ranks[to] = self.role_table.rank_of(role, index)
        self.transport.send(rank, codec.encode_frames(msg))

    def send_role(self, role: str, msg) -> None:
        """Send ``msg`` to every rank of ``role`` (the message is encoded once)."""
        frames = codec.encode_frames(msg)
        for rank in self.role_table.ranks(role):
            self.transport.send(rank, frames)

    def send_all(self, msg, include_self: bool = False) -> None:
        frames = codec.encode_frames(msg)
        for rank in range(self.comm.Get_size()):
            if include_self or rank != self.role_table.rank:
                self.transport.send(rank, frames)

    def progress(self) -> None:
        """Retire completed sends and send waiting batches; never blocks (but back-pressure)."""
        self.transport.progress()

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every peer has taken every message we sent (receiving meanwhile)."""
        self.transport.flush(timeout_s)

    # ---------------------------------------------------------------- receiving

    def poll(self) -> Envelope | None:
        """The next message that has arrived, or None at once.

        Raises :class:`~transports.codec.CodecError` for a message that does not decode (the
        next poll goes on with the message after it).
        """
        ready = self._ready
        if not ready:
            got = self.transport.poll()
            if got is None:
                return None
            source, headers, buffers = got
            if len(headers) == 1:
                return _tuple_new(Envelope, (self._senders[source], codec.decode(headers[0], buffers)))
            # A batch: decode it all in one go and queue the envelopes (built in C: map, zip).
            # A message that failed to decode holds its exception, raised in its turn.
            sender = repeat(self._senders[source])
            ready.extend(map(_tuple_new, repeat(Envelope), zip(sender, codec.decode_many(headers))))
        env = ready.popleft()
        if isinstance(env.msg, Exception):
            raise env.msg
        return env

    def drain(self, limit: int | None = None) -> list[Envelope]:
        """Every message that has arrived by now (up to ``limit``), oldest first per sender."""
        out = []
        while limit is None or len(out) < limit:
            env = self.poll()
            if env is None:
                break
            out.append(env)
        return out

    def wait(self, timeout_s: float, types: Iterable[type] | None = None) -> Envelope:
        """Block (with a back-off, not a spin) until a message arrives; raise on timeout.

        With ``types``, messages of other types are an error: this is for lock-step
        exchanges where anything else means a protocol bug.
        """
        deadline = time.monotonic() + timeout_s
        backoff = Backoff()
        while True:
            env = self.poll()
            if env is not None:
                if types is not None and not isinstance(env.msg, tuple(types)):
                    raise RuntimeError(
                        f"{self.address}: expected {[t.__name__ for t in types]}, "
                        f"got {type(env.msg).__name__} from {env.sender}"
                    )
                return env
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.address}: no message within {timeout_s} s")
            self.transport.progress()
            backoff.sleep()

    # ----------------------------------------------------------------- shutdown

    def close(self, timeout_s: float = 60.0) -> None:
        """Quiesce: complete our sends, then wait for every rank to do the same.

        Collective over the communicator. While waiting, anything that still arrives is
        received and dropped, so a peer blocked sending to us is always released.
        """
        if self.closed:
            return
        deadline = time.monotonic() + timeout_s
        self.transport.progress()  # sends the waiting batches
        while self.transport.pending_sends:
            self._drop_incoming()
            self.transport.progress()
            self._check(deadline, "completing sends")
            time.sleep(50e-6)
        barrier = self.comm.Ibarrier()  # non-blocking: we keep receiving until all are here
        while not barrier.Test():
            self._drop_incoming()
            self._check(deadline, "waiting for the other ranks to close")
            time.sleep(200e-6)
        self._drop_incoming()
        # Every rank has completed its sends: nothing more can come, so the posted receives go.
        self.dropped_after_close += self.transport.close()
        self.closed = True

    def _drop_incoming(self) -> None:
        self.dropped_after_close += len(self._ready)
        self._ready.clear()
        while (got := self.transport.poll()) is not None:
            self.dropped_after_close += len(got.headers)

    def _check(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{self.address}: mailbox close timed out {what}")
