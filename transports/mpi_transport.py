"""Point-to-point transport of framed byte messages over an MPI communicator.

A frame list is ``[header, *buffers]``. The header travels on ``HEADER_TAG``; each buffer
follows on ``BUFFER_TAG`` from the same sender. MPI does not let messages of one
(source, tag, communicator) overtake each other, so a receiver that takes a header and then
exactly its buffers from that source always pairs them correctly, and a sender's messages
arrive in the order it sent them.

Blocking behaviour, call by call:
- :meth:`MPITransport.send` never blocks while the bytes in flight stay under
  ``max_inflight_bytes``; past it, it waits for earlier sends to complete (back-pressure),
  receiving incoming messages into a local queue meanwhile so two ranks that send to each
  other cannot deadlock.
- :meth:`MPITransport.poll` never blocks: a matched probe (``Improbe``) finds a message of
  any size, which is then received with ``Mrecv`` into a buffer of exactly its size.
- :meth:`MPITransport.flush` blocks until every send has completed, receiving meanwhile.
"""

from __future__ import annotations

import collections
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

HEADER_TAG = 7301
BUFFER_TAG = 7302


@dataclass
class _Pending:
    request: MPI.Request
    nbytes: int
    keepalive: object  # the buffer must outlive the request; MPI reads it asynchronously


@dataclass
class Received:
    source: int  # rank in the transport's communicator
    frames: list  # [header bytes, *buffers as numpy uint8 arrays]


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
    def __init__(self, comm: MPI.Comm, max_inflight_bytes: int = 256 * 1024 * 1024,
                 max_pooled_bytes: int = 256 * 1024 * 1024):
        """``max_pooled_bytes``: receive buffers kept for reuse (0: a fresh buffer every time)."""
        self.comm = comm
        self.max_inflight_bytes = max_inflight_bytes
        self._buffers = _ReceiveBuffers(max_free_bytes=max_pooled_bytes)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._inflight_bytes = 0
        self._stash: collections.deque[Received] = collections.deque()
        self.bytes_sent = 0
        self.bytes_received = 0

    # ------------------------------------------------------------------ sending

    @property
    def inflight_bytes(self) -> int:
        return self._inflight_bytes

    def send(self, dest: int, frames: list) -> None:
        """Start a non-blocking send of ``[header, *buffers]`` to ``dest`` (see module doc)."""
        # The header message starts with the number of buffers that follow it, so the
        # receiver needs no knowledge of the message format to take them all.
        frames = [len(frames[1:]).to_bytes(4, "little") + bytes(frames[0]), *frames[1:]]
        size = sum(_nbytes(f) for f in frames)
        # Wait for room first, but never refuse a single message larger than the bound:
        # it goes alone once everything before it is out.
        while self._pending and self._inflight_bytes + size > self.max_inflight_bytes:
            self._wait_some_sends()
        for i, frame in enumerate(frames):
            tag = HEADER_TAG if i == 0 else BUFFER_TAG
            req = self.comm.Isend([frame, MPI.BYTE], dest=dest, tag=tag)
            self._pending.append(_Pending(req, _nbytes(frame), frame))
        self._inflight_bytes += size
        self.bytes_sent += size

    def progress(self) -> None:
        """Retire completed sends so their buffers can be freed (never blocks)."""
        if not self._pending:
            return
        # Requests to different destinations complete in any order: test them all.
        still = collections.deque()
        for p in self._pending:
            if p.request.Test():
                self._inflight_bytes -= p.nbytes
            else:
                still.append(p)
        self._pending = still

    def _wait_some_sends(self) -> None:
        self.progress()
        if not self._pending:
            return
        # Keep receiving while we wait: the peer we are waiting on may itself be blocked
        # sending to us, and only our receive lets it go on.
        got = self._receive_one()
        if got is not None:
            self._stash.append(got)
        else:
            time.sleep(0)  # yield the core to the peer process on an oversubscribed node

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every send has completed (incoming messages are queued meanwhile)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self._pending:
            self._wait_some_sends()
            if deadline is not None and time.monotonic() > deadline and self._pending:
                raise TimeoutError(f"{len(self._pending)} MPI sends still pending after {timeout_s} s")

    @property
    def pending_sends(self) -> int:
        return len(self._pending)

    # ---------------------------------------------------------------- receiving

    def poll(self) -> Received | None:
        """Return the next received message, or None at once if none has arrived."""
        if self._stash:
            return self._stash.popleft()
        return self._receive_one()

    def _receive_one(self) -> Received | None:
        status = MPI.Status()
        msg = self.comm.improbe(source=MPI.ANY_SOURCE, tag=HEADER_TAG, status=status)
        if msg is None:
            return None
        source = status.Get_source()
        header = bytearray(status.Get_count(MPI.BYTE))
        msg.Recv([header, MPI.BYTE])
        n_buffers = int.from_bytes(bytes(header[:4]), "little")
        frames: list = [bytes(header[4:])]
        for _ in range(n_buffers):
            # The header's buffers are the next BUFFER_TAG messages from this source.
            st = MPI.Status()
            bmsg = self.comm.mprobe(source=source, tag=BUFFER_TAG, status=st)
            buf = self._buffers.take(st.Get_count(MPI.BYTE))
            bmsg.Recv([buf, MPI.BYTE])
            frames.append(buf)
        self.bytes_received += sum(_nbytes(f) for f in frames)
        return Received(source, frames)


def _nbytes(buf) -> int:
    return memoryview(buf).nbytes
