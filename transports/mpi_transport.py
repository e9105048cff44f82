"""Point-to-point transport of framed byte messages over an MPI communicator.

A message is a frame list ``[header, *buffers]``. The header travels on ``HEADER_TAG``; each
buffer follows on ``BUFFER_TAG`` from the same sender. MPI does not let messages of one
(source, tag, communicator) overtake each other, so a receiver that takes a header and then
exactly its buffers from that source always pairs them correctly, and a sender's messages
arrive in the order it sent them.

Header messages land in receives posted ahead of time: ``RECEIVE_SLOTS`` persistent receives
from any source, each into a buffer of ``SLOT_BYTES``, kept posted and tested in the order
they were posted (MPI matches posted receives in that order, so per-sender order holds). An
empty poll is then one ``MPI_Test`` and a message needs no probe and no allocation: the
round trip costs a fraction of what a matched probe (``Improbe`` + ``Mrecv``) per message did
(bench/mailbox_parts.py). A header too large for a slot travels on ``BUFFER_TAG`` too, as the
first of its message's buffers, announced by a 4-byte word in the slot.

Small messages without buffers are coalesced, adaptively (as Nagle's algorithm does for TCP):
one goes out at once when the peer has taken everything we sent it before, so an idle pair
of ranks sees no added latency; while the peer has not yet taken our last message, the next
ones wait in a per-destination batch that goes out as one MPI message. A batch goes out when
it reaches ``batch_bytes``, before a message with buffers (or a large one) to the same
destination, so order holds, and at every "idle point": :meth:`~MPITransport.progress`, a
:meth:`~MPITransport.poll` that finds nothing, :meth:`~MPITransport.flush`. So a message
never waits in a batch past this rank's next progress() or empty poll() — an actor's loop
makes both all the time. Header messages are sent in synchronous mode (``Issend``): their
completion means a receive of the peer's has matched them (a posted slot, whose contents the
peer takes at its next poll: at most ``RECEIVE_SLOTS`` messages wait there), which is the
"taken" signal above, and what :attr:`~MPITransport.inflight_bytes` counts is then bytes the
peer has not yet taken.

Wire format of a header message: 4 bytes (little-endian) that say what follows:
- ``n < LARGE``: one message, its header bytes, then ``n`` buffers on ``BUFFER_TAG``;
- ``LARGE | n``: one message whose header is the first of ``n + 1`` buffers on ``BUFFER_TAG``;
- ``BATCH``: buffer-less messages, each as a 4-byte length and that many header bytes.

Blocking behaviour, call by call:
- :meth:`MPITransport.send` never blocks while the bytes in flight stay under
  ``max_inflight_bytes``; past it, it waits for earlier sends to complete (back-pressure),
  receiving incoming messages into a local queue meanwhile so two ranks that send to each
  other cannot deadlock.
- :meth:`MPITransport.progress` never blocks (it may start sends, which back-pressure can
  hold up, exactly as in send()).
- :meth:`MPITransport.poll` never blocks: it tests the oldest posted slot. The buffers of a
  message follow its header and are taken with blocking ``Mprobe``/``Mrecv``: the sender
  started them together with the header.
- :meth:`MPITransport.flush` blocks until every send has completed, i.e. every peer has
  taken every message, receiving meanwhile.
- :meth:`MPITransport.close` cancels the posted slots (call it once no peer sends any more).
"""

from __future__ import annotations

import collections
import struct
import threading
import time
import weakref
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

HEADER_TAG = 7301
BUFFER_TAG = 7302

BATCH = 0xFFFFFFFF  # first word of a header message holding a batch of buffer-less messages
LARGE = 0x80000000  # first-word flag: the header did not fit a slot and follows on BUFFER_TAG
# Every rank's slots must hold the largest header message any rank puts in one, so these are
# fixed here, not options: a batch (at most batch_bytes + a quarter, see MPITransport), or one
# message whose header is at most SLOT_BYTES - 4.
SLOT_BYTES = 96 * 1024
RECEIVE_SLOTS = 8  # posted receives: messages that can land before the application polls
_U32 = struct.Struct("<I")
_SINGLE = _U32.pack(0)  # first word of a header message holding one buffer-less message
_BATCH_START = _U32.pack(BATCH)
_NO_BUFFERS: list = []  # shared by every received message without buffers: never modified
_tuple_new = tuple.__new__  # builds a Received without the Python frame of its __new__


class Received(NamedTuple):
    """One message, or a batch of buffer-less messages, from one source."""

    source: int  # rank in the transport's communicator
    headers: list  # the message's header (bytes or memoryview); a batch: each message's
    buffers: list  # numpy uint8 arrays, one per out-of-band buffer (most messages: none)


class _Lease:
    """The owner, as numpy sees it, of one loan of a pooled buffer.

    Every array, view or tensor made from the loaned array keeps this object alive (numpy
    collapses a view's base to the first base that is not an array: this one); when the
    last of them is gone, the buffer goes back to the pool.
    """

    __slots__ = ("__array_interface__", "block", "__weakref__")

    def __init__(self, block: np.ndarray):
        self.block = block
        self.__array_interface__ = block.__array_interface__


class _ReceiveBuffers:
    """Receive buffers for large frames, reused once the application has let go of them.

    Fresh memory costs a page fault and a kernel zeroing of every page: for a 64 MiB frame
    that is about as long again as receiving it (bench/mailbox.py). Only frames of at least
    ``min_bytes`` are pooled, reuse is by exact size, and at most ``max_free_bytes`` wait
    in the pool; buffers still in use by the application are never in it.
    """

    def __init__(self, min_bytes: int = 1 << 20, max_free_bytes: int = 256 << 20):
        self.min_bytes = min_bytes
        self.max_free_bytes = max_free_bytes
        self._free: dict[int, list[np.ndarray]] = {}
        self._free_bytes = 0
        # Reentrant: a loan can end (its finalizer run) during a garbage collection that
        # starts inside take(), on this very thread.
        self._lock = threading.RLock()

    def take(self, nbytes: int) -> np.ndarray:
        """An uninitialised uint8 array of ``nbytes``, the caller's until it drops every view."""
        if nbytes < self.min_bytes:
            return np.empty(nbytes, dtype=np.uint8)
        with self._lock:
            stack = self._free.get(nbytes)
            block = stack.pop() if stack else None
            if block is not None:
                self._free_bytes -= nbytes
        if block is None:
            block = np.empty(nbytes, dtype=np.uint8)
        lease = _Lease(block)
        weakref.finalize(lease, self._give_back, block).atexit = False
        return np.asarray(lease)

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            if self._free_bytes + block.nbytes <= self.max_free_bytes:
                self._free.setdefault(block.nbytes, []).append(block)
                self._free_bytes += block.nbytes

    @property
    def free_bytes(self) -> int:
        return self._free_bytes


class MPITransport:
    def __init__(
        self,
        comm: MPI.Comm,
        max_inflight_bytes: int = 256 * 1024 * 1024,
        max_pooled_bytes: int = 256 * 1024 * 1024,
        batch_bytes: int = 64 * 1024,
    ):
        """``max_pooled_bytes``: receive buffers kept for reuse (0: a fresh buffer every time).
        ``batch_bytes``: a batch goes out once it holds this much; 0 turns coalescing off."""
        # The largest batch: under batch_bytes, then one more entry (4 + batch_entry_bytes).
        if batch_bytes < 0 or 4 + batch_bytes + 4 + batch_bytes // 4 > SLOT_BYTES:
            raise ValueError(f"batch_bytes must be between 0 and {(SLOT_BYTES - 8) * 4 // 5}, got {batch_bytes}")
        self.comm = comm
        self.max_inflight_bytes = max_inflight_bytes
        self.batch_bytes = batch_bytes
        # Headers up to this size may join a batch; a larger one goes alone (a copy into the
        # batch would cost more than the MPI message it saves).
        self.batch_entry_bytes = batch_bytes // 4
        self._buffers = _ReceiveBuffers(max_free_bytes=max_pooled_bytes)
        self._pending: list[tuple[MPI.Request, int, object]] = []  # (request, bytes, keepalive)
        self._inflight_bytes = 0
        self._batches: dict[int, bytearray] = {}  # destination -> batch not yet sent
        self._last_header: dict[int, MPI.Request] = {}  # destination -> last header send
        # Received and not yet handed out, oldest first (poll() takes from here first).
        self._inbox: collections.deque[Received] = collections.deque()
        self._status = MPI.Status()  # reused by every test and probe
        # The posted slots, tested oldest first: _head is the next one to complete.
        self._slot_buffers = [bytearray(SLOT_BYTES) for _ in range(RECEIVE_SLOTS)]
        self._slots = [comm.Recv_init([b, MPI.BYTE], MPI.ANY_SOURCE, HEADER_TAG) for b in self._slot_buffers]
        MPI.Prequest.Startall(self._slots)
        self._head = 0
        self.closed = False
        self.bytes_sent = 0
        self.bytes_received = 0
        self.messages_sent = 0
        self.mpi_messages_sent = 0  # header messages: fewer than messages_sent when batching

    # ------------------------------------------------------------------ sending

    @property
    def inflight_bytes(self) -> int:
        return self._inflight_bytes

    def send(self, dest: int, frames: list) -> None:
        """Send ``[header, *buffers]`` to ``dest``: start it now, or add it to a batch (see module doc)."""
        header = frames[0]
        self.messages_sent += 1
        if len(frames) == 1 and len(header) <= self.batch_entry_bytes:
            batch = self._batches.get(dest)
            if batch is None:
                last = self._last_header.get(dest)
                # Get_status, not Test: it leaves the request for progress() to retire.
                if last is None or last.Get_status():
                    self._start_alone(dest, _SINGLE + header)  # the peer is keeping up: no batch
                    return
                batch = self._batches[dest] = bytearray(_BATCH_START)
            batch += _U32.pack(len(header))
            batch += header
            if len(batch) >= self.batch_bytes:
                self._send_batch(dest)
            return
        # A message with buffers, or a large one: whatever waits for ``dest`` goes first.
        if dest in self._batches:
            self._send_batch(dest)
        # The header word says how many buffers follow, so the receiver needs no knowledge
        # of the message format to take them all.
        if 4 + len(header) <= SLOT_BYTES:
            self._start(dest, [_U32.pack(len(frames) - 1) + bytes(header), *frames[1:]])
        else:  # too large for the peer's slot: announced there, sent as the first buffer
            self._start(dest, [_U32.pack(LARGE | (len(frames) - 1)), *frames])

    def _send_batch(self, dest: int) -> None:
        self._start_alone(dest, self._batches.pop(dest))

    def _start_alone(self, dest: int, data) -> None:
        """:meth:`_start` for a header message without buffers: most messages, so kept lean."""
        size = len(data)
        while self._pending and self._inflight_bytes + size > self.max_inflight_bytes:
            self._wait_some_sends()
        req = self.comm.Issend(data, dest, HEADER_TAG)
        self._last_header[dest] = req
        self._pending.append((req, size, data))  # the buffer must outlive the request
        self._inflight_bytes += size
        self.bytes_sent += size
        self.mpi_messages_sent += 1

    def _start(self, dest: int, frames: list) -> None:
        """Start the MPI sends of one header message and its buffers (may wait for room)."""
        sizes = [_nbytes(f) for f in frames]
        size = sum(sizes)
        # Wait for room first, but never refuse a single message larger than the bound:
        # it goes alone once everything before it is out.
        while self._pending and self._inflight_bytes + size > self.max_inflight_bytes:
            self._wait_some_sends()
        # Synchronous mode for the header: it completes once the peer has matched it.
        req = self.comm.Issend([frames[0], MPI.BYTE], dest=dest, tag=HEADER_TAG)
        self._last_header[dest] = req
        self._pending.append((req, sizes[0], frames[0]))  # the buffer must outlive the request
        for frame, nbytes in zip(frames[1:], sizes[1:]):
            req = self.comm.Isend([frame, MPI.BYTE], dest=dest, tag=BUFFER_TAG)
            self._pending.append((req, nbytes, frame))
        self._inflight_bytes += size
        self.bytes_sent += size
        self.mpi_messages_sent += 1

    def progress(self) -> None:
        """Retire completed sends, then send every waiting batch (an idle point: see module doc)."""
        if self._pending:
            self._retire()
        if self._batches:
            for dest in list(self._batches):
                self._send_batch(dest)

    def _retire(self) -> bool:
        """Forget the sends that have completed; True if any had."""
        # Requests to different destinations complete in any order: test them all.
        still = [p for p in self._pending if not p[0].Test()]
        if len(still) == len(self._pending):
            return False
        self._inflight_bytes = sum(p[1] for p in still)
        self._pending = still
        return True

    def _wait_some_sends(self) -> None:
        if self._retire() or not self._pending:
            return
        # Keep receiving while we wait: the peer we are waiting on may itself be blocked
        # sending to us, and only our receive lets it go on.
        got = self._receive()
        if got is not None:
            self._inbox.append(got)
        else:
            time.sleep(0)  # yield the core to the peer process on an oversubscribed node

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every send has completed (incoming messages are queued meanwhile)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.progress()  # sends the waiting batches
        while self._pending:
            self._wait_some_sends()
            if deadline is not None and time.monotonic() > deadline and self._pending:
                raise TimeoutError(f"{len(self._pending)} MPI sends still pending after {timeout_s} s")

    @property
    def pending_sends(self) -> int:
        """MPI sends not yet completed, plus batches not yet sent."""
        return len(self._pending) + len(self._batches)

    # ---------------------------------------------------------------- receiving

    def poll(self) -> Received | None:
        """Return the next received message (or batch), or None at once if none has arrived."""
        if self._inbox:
            return self._inbox.popleft()
        got = self._receive()
        if got is None and self._batches:  # nothing to read: an idle point, so nothing of ours may wait
            self.progress()
        return got

    def _receive(self) -> Received | None:
        """Receive one header message (a message or a batch), if one has come."""
        if self.closed:
            return None
        status = self._status
        slot = self._head
        request = self._slots[slot]
        if not request.Test(status):
            return None
        self._head = (slot + 1) % RECEIVE_SLOTS
        source = status.Get_source()
        count = status.Get_count(MPI.BYTE)
        self.bytes_received += count
        # Copy out what the message needs, then post the slot again at once.
        data = memoryview(self._slot_buffers[slot])[:count]
        word = _U32.unpack_from(data)[0] if count >= 4 else None
        if word == BATCH:
            # bytes, once: each message's slice of it is then a cheap copy, and msgpack
            # reads bytes faster than a memoryview.
            data = bytes(data)
        elif word is not None and not word & LARGE:
            header = bytes(data[4:])
        request.Start()
        if word is None:
            raise RuntimeError(f"MPI transport: a {count}-byte header message from rank {source}")
        if word == BATCH:
            headers, offset = [], 4
            while offset < count:
                (n,) = _U32.unpack_from(data, offset)
                offset += 4 + n
                headers.append(data[offset - n : offset])
            if offset != count:
                raise RuntimeError(f"MPI transport: a batch from rank {source} is cut short")
            return _tuple_new(Received, (source, headers, _NO_BUFFERS))
        buffers = _NO_BUFFERS
        if word & LARGE:
            word &= ~LARGE
            header = self._take_buffer(source, status, pooled=False)
        if word:
            buffers = [self._take_buffer(source, status) for _ in range(word)]
        return _tuple_new(Received, (source, [header], buffers))

    def _take_buffer(self, source: int, status: MPI.Status, pooled: bool = True):
        """The next BUFFER_TAG message from ``source`` (its sender started it with the header)."""
        bmsg = self.comm.mprobe(source=source, tag=BUFFER_TAG, status=status)
        count = status.Get_count(MPI.BYTE)
        buf = self._buffers.take(count) if pooled else bytearray(count)
        bmsg.Recv([buf, MPI.BYTE])
        self.bytes_received += count
        return buf

    # ----------------------------------------------------------------- shutdown

    def close(self) -> int:
        """Cancel the posted slots; the number of messages found in them (then dropped).

        Call once no peer sends to this rank any more (a mailbox closes collectively first):
        a message still on its way would find no receive.
        """
        if self.closed:
            return 0
        self.closed = True
        dropped = 0
        for request in self._slots:
            request.Cancel()
            request.Wait(self._status)
            if not self._status.Is_cancelled():
                dropped += 1
            request.Free()
        return dropped


def _nbytes(buf) -> int:
    return memoryview(buf).nbytes
