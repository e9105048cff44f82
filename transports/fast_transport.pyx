# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The MPI transport of transports/mpi_transport.py, compiled: the same wire, the same rules.

``MPITransport`` there is the reference: its module doc says what goes on the wire, when a
small message is batched and what blocks. This class does exactly that, with the per-message
path (send a header message, poll a slot, retire completed sends) in C calls to MPI on C
arrays instead of Python objects: a round trip of the mailbox spends most of its time in that
Python bookkeeping, not in MPI (bench/mailbox_parts.py). Large frames are received in C into a
pool of its own (``ReceiveBuffers``); the rare paths (close) stay close to the Python original.

Built by ``python -m transports.build`` (``make venv`` runs it) against the mpi.h of the MPI
that mpi4py loads; transports/choose.py uses it only when that MPI is the one it was built
for, and ``MPIRL_TRANSPORT=python`` turns it off. Every mailbox test runs with both.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_FillInfo, PyObject_GetBuffer, PyBuffer_Release
from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy
from mpi4py cimport MPI
from mpi4py.libmpi cimport (
    MPI_ANY_SOURCE, MPI_BYTE, MPI_Cancel, MPI_Comm, MPI_Get_count, MPI_Issend, MPI_Isend, MPI_Message, MPI_Mprobe,
    MPI_Mrecv,
    MPI_Recv_init, MPI_Request, MPI_Request_free, MPI_Request_get_status, MPI_REQUEST_NULL,
    MPI_Start, MPI_STATUS_IGNORE, MPI_Status, MPI_SUCCESS, MPI_Test, MPI_Test_cancelled, MPI_Wait,
)

import collections
import time
from typing import Union

import msgspec
import msgspec.structs
import numpy as np
from mpi4py import MPI as _MPI

from transports import codec as _codec
from transports.mpi_transport import (
    BATCH, BUFFER_TAG, HEADER_TAG, LARGE, RECEIVE_SLOTS, SLOT_BYTES, Received, _nbytes,
)

cdef object _tuple_new = tuple.__new__
cdef list _NO_BUFFERS = []
cdef bytes _BATCH_START = BATCH.to_bytes(4, "little")
cdef int _HEADER_TAG = HEADER_TAG
cdef int _BUFFER_TAG = BUFFER_TAG
cdef uint32_t _BATCH = BATCH
cdef uint32_t _LARGE = LARGE
cdef Py_ssize_t _SLOT_BYTES = SLOT_BYTES
cdef int _SLOTS = RECEIVE_SLOTS

cdef extern from *:
    """
    #if defined(OPEN_MPI)
    #define MPIRL_MPI_VENDOR "Open MPI"
    #elif defined(MPICH_VERSION)
    #define MPIRL_MPI_VENDOR "MPICH"
    #else
    #define MPIRL_MPI_VENDOR "unknown"
    #endif
    """
    const char* MPIRL_MPI_VENDOR

# The MPI whose mpi.h this module was compiled against (mpi4py.MPI.get_vendor()'s name).
BUILT_FOR = MPIRL_MPI_VENDOR.decode()


cdef inline void _check(int ierr) except *:
    if ierr != MPI_SUCCESS:
        raise _MPI.Exception(ierr)


cdef inline uint32_t _word(const char* p) noexcept:
    """The little-endian 32-bit word at ``p``."""
    cdef const unsigned char* b = <const unsigned char*>p
    return b[0] | (<uint32_t>b[1] << 8) | (<uint32_t>b[2] << 16) | (<uint32_t>b[3] << 24)


cdef void* _resized(void* block, size_t nbytes) except NULL:
    """``realloc``, raising MemoryError where it fails (``block`` then stays as it was)."""
    cdef void* grown = realloc(block, nbytes)
    if grown == NULL:
        raise MemoryError()
    return grown


cdef inline bytes _u32(uint32_t n):
    return n.to_bytes(4, "little")


# ------------------------------------------------------------------ receive buffers

cdef class _Block:
    """Memory for one large frame: a numpy array (numpy asks the kernel for huge pages on big
    allocations, as the raw receiver's buffer gets) and its address."""
    cdef object owner
    cdef char* ptr
    cdef Py_ssize_t nbytes

    def __cinit__(self, Py_ssize_t nbytes):
        cdef Py_buffer buf
        self.owner = np.empty(nbytes, dtype=np.uint8)
        PyObject_GetBuffer(self.owner, &buf, PyBUF_WRITABLE)
        self.ptr = <char*>buf.buf
        PyBuffer_Release(&buf)  # the array keeps the memory
        self.nbytes = nbytes


cdef class ReceiveBuffer:
    """A pooled receive buffer lent to the application: a writable buffer (``len``, the
    buffer protocol; ``np.frombuffer`` views it) whose memory goes back to its pool once the
    last reference is gone, views included (a view holds a reference to it).

    ``_ReceiveBuffers`` of transports/mpi_transport.py does the same with a weakref finalizer
    and an ``np.asarray`` per loan: that cost 9 µs with warm caches and 140 µs right after a
    64 MiB receive had swept them, on the path of every large message (bench/mailbox.py)."""
    cdef _Block block  # None until a pool lends one: only ReceiveBuffers.take makes them
    cdef ReceiveBuffers pool

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self.block is None:
            raise ValueError("a ReceiveBuffer comes from ReceiveBuffers.take")
        PyBuffer_FillInfo(view, self, self.block.ptr, self.block.nbytes, 0, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __len__(self):
        return 0 if self.block is None else self.block.nbytes

    @property
    def nbytes(self):
        return len(self)

    def __dealloc__(self):
        if self.pool is not None and self.block is not None:
            self.pool._give_back(self.block)


cdef class ReceiveBuffers:
    """The compiled transport's pool of large receive buffers; the rules of
    ``_ReceiveBuffers`` (transports/mpi_transport.py): frames of at least ``min_bytes`` only,
    reuse by exact size, at most ``max_free_bytes`` waiting, none still in use among them.
    No lock: the GIL is held throughout, and nothing here can run Python code mid-way."""
    cdef readonly Py_ssize_t min_bytes
    cdef readonly Py_ssize_t max_free_bytes
    cdef readonly Py_ssize_t free_bytes
    cdef dict _free  # nbytes -> list of _Block

    def __init__(self, Py_ssize_t min_bytes=1 << 20, Py_ssize_t max_free_bytes=256 << 20):
        self.min_bytes = min_bytes
        self.max_free_bytes = max_free_bytes
        self.free_bytes = 0
        self._free = {}

    def take(self, Py_ssize_t nbytes):
        """A writable buffer of ``nbytes`` (uninitialised), the caller's until it drops every view."""
        return self._take(nbytes)

    cdef object _take(self, Py_ssize_t nbytes):
        if nbytes < self.min_bytes:
            return bytearray(nbytes)
        cdef ReceiveBuffer lease = ReceiveBuffer.__new__(ReceiveBuffer)
        cdef list stack = self._free.get(nbytes)
        if stack:
            lease.block = stack.pop()
            self.free_bytes -= nbytes
        else:
            lease.block = _Block(nbytes)
        lease.pool = self
        return lease

    cdef _give_back(self, _Block block):
        if self.free_bytes + block.nbytes > self.max_free_bytes:
            return
        stack = self._free.get(block.nbytes)
        if stack is None:
            stack = self._free[block.nbytes] = []
        stack.append(block)
        self.free_bytes += block.nbytes


cdef inline char* _writable_address(object buf):
    """The memory of a bytearray or a ReceiveBuffer."""
    if type(buf) is bytearray:
        return PyByteArray_AS_STRING(buf)
    return (<ReceiveBuffer>buf).block.ptr


cdef class FastTransport:
    """Drop-in for :class:`transports.mpi_transport.MPITransport` (same constructor, methods, counters)."""

    cdef readonly object comm
    cdef MPI_Comm _comm
    cdef public Py_ssize_t max_inflight_bytes
    cdef readonly Py_ssize_t batch_bytes
    cdef readonly Py_ssize_t batch_entry_bytes
    cdef ReceiveBuffers _buffers
    # Sends not yet completed: parallel arrays (request, bytes, destination, header sequence
    # number or 0 for a buffer) and, in ``_keep``, what each send's memory belongs to.
    cdef MPI_Request* _req
    cdef Py_ssize_t* _size
    cdef int* _dest
    cdef uint64_t* _seq
    cdef list _keep
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap
    cdef Py_ssize_t _inflight
    cdef dict _batches  # destination -> batch (bytearray) not yet sent
    # Per destination: the last header message sent, as its sequence number and request, and
    # whether it has been seen complete (retired): the "peer has taken everything" signal.
    cdef int _world
    cdef uint64_t _next_seq
    cdef uint64_t* _last_seq
    cdef MPI_Request* _last_req
    cdef char* _last_done
    cdef object _inbox
    cdef MPI_Request* _slots
    cdef char** _slot_mem
    cdef int _head
    cdef readonly bint closed
    cdef public long long bytes_sent
    cdef public long long bytes_received
    cdef public long long messages_sent
    cdef public long long mpi_messages_sent

    def __cinit__(self):
        self._req = NULL
        self._size = NULL
        self._dest = NULL
        self._seq = NULL
        self._last_seq = NULL
        self._last_req = NULL
        self._last_done = NULL
        self._slots = NULL
        self._slot_mem = NULL
        self.closed = True  # until the slots are posted

    def __init__(
        self,
        MPI.Comm comm not None,
        max_inflight_bytes: int = 256 * 1024 * 1024,
        max_pooled_bytes: int = 256 * 1024 * 1024,
        batch_bytes: int = 64 * 1024,
    ):
        if batch_bytes < 0 or 4 + batch_bytes + 4 + batch_bytes // 4 > SLOT_BYTES:
            raise ValueError(f"batch_bytes must be between 0 and {(SLOT_BYTES - 8) * 4 // 5}, got {batch_bytes}")
        cdef int i
        self.comm = comm
        self._comm = comm.ob_mpi
        self.max_inflight_bytes = max_inflight_bytes
        self.batch_bytes = batch_bytes
        self.batch_entry_bytes = batch_bytes // 4
        self._buffers = ReceiveBuffers(max_free_bytes=max_pooled_bytes)
        self._cap = 64
        self._n = 0
        self._req = <MPI_Request*>malloc(self._cap * sizeof(MPI_Request))
        self._size = <Py_ssize_t*>malloc(self._cap * sizeof(Py_ssize_t))
        self._dest = <int*>malloc(self._cap * sizeof(int))
        self._seq = <uint64_t*>malloc(self._cap * sizeof(uint64_t))
        self._keep = []
        self._inflight = 0
        self._batches = {}
        self._world = comm.Get_size()
        self._next_seq = 1
        self._last_seq = <uint64_t*>calloc(self._world, sizeof(uint64_t))
        self._last_req = <MPI_Request*>malloc(self._world * sizeof(MPI_Request))
        self._last_done = <char*>malloc(self._world)
        self._slots = <MPI_Request*>malloc(_SLOTS * sizeof(MPI_Request))
        self._slot_mem = <char**>calloc(_SLOTS, sizeof(char*))
        if (not self._req or not self._size or not self._dest or not self._seq or not self._last_seq
                or not self._last_req or not self._last_done or not self._slots or not self._slot_mem):
            raise MemoryError()
        for i in range(self._world):
            self._last_req[i] = MPI_REQUEST_NULL
            self._last_done[i] = 1
        self._inbox = collections.deque()
        for i in range(_SLOTS):
            self._slot_mem[i] = <char*>malloc(_SLOT_BYTES)
            if not self._slot_mem[i]:
                raise MemoryError()
        # From here on the slots' memory may be MPI's: should a call fail part-way, it is left
        # allocated (__dealloc__ frees it only after close()).
        self.closed = False
        for i in range(_SLOTS):
            _check(MPI_Recv_init(self._slot_mem[i], <int>_SLOT_BYTES, MPI_BYTE, MPI_ANY_SOURCE, _HEADER_TAG,
                                 self._comm, &self._slots[i]))
        for i in range(_SLOTS):
            _check(MPI_Start(&self._slots[i]))
        self._head = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.messages_sent = 0
        self.mpi_messages_sent = 0

    def __dealloc__(self):
        free(self._req)
        free(self._size)
        free(self._dest)
        free(self._seq)
        free(self._last_seq)
        free(self._last_req)
        free(self._last_done)
        cdef int i
        # Slots still posted (never closed) may yet be written by MPI: their memory is left.
        if self.closed and self._slot_mem != NULL:
            for i in range(_SLOTS):
                free(self._slot_mem[i])
            free(self._slot_mem)
            free(self._slots)

    # ------------------------------------------------------------------ sending

    @property
    def inflight_bytes(self):
        return self._inflight

    @property
    def pending_sends(self):
        """MPI sends not yet completed, plus batches not yet sent."""
        return self._n + len(self._batches)

    def send(self, int dest, frames):
        """Send ``[header, *buffers]`` to ``dest``: start it now, or add it to a batch."""
        self._send(dest, frames)

    cdef _send(self, int dest, frames):
        cdef object header = frames[0]
        cdef Py_ssize_t hlen = len(header)
        cdef bytearray batch
        self.messages_sent += 1
        if len(frames) == 1 and hlen <= self.batch_entry_bytes:
            if not 0 <= dest < self._world:
                raise ValueError(f"destination rank {dest} is not in a communicator of {self._world}")
            batch = self._batches.get(dest)
            if batch is None:
                if self._peer_took_all(dest):
                    self._start_alone(dest, b"\0\0\0\0" + header)  # the peer is keeping up: no batch
                    return
                batch = bytearray(_BATCH_START)
                self._batches[dest] = batch
            batch += _u32(<uint32_t>hlen)
            batch += header
            if len(batch) >= self.batch_bytes:
                self._send_batch(dest)
            return
        # A message with buffers, or a large one: whatever waits for ``dest`` goes first.
        if dest in self._batches:
            self._send_batch(dest)
        if 4 + hlen <= SLOT_BYTES:
            self._start(dest, [_u32(<uint32_t>(len(frames) - 1)) + bytes(header), *frames[1:]])
        else:  # too large for the peer's slot: announced there, sent as the first buffer
            self._start(dest, [_u32(_LARGE | <uint32_t>(len(frames) - 1)), *frames])

    cdef bint _peer_took_all(self, int dest) except -1:
        """Whether the last header message to ``dest`` has been matched (MPITransport: Get_status)."""
        cdef int flag = 0
        if self._last_done[dest]:
            return True
        _check(MPI_Request_get_status(self._last_req[dest], &flag, MPI_STATUS_IGNORE))
        return flag != 0

    cdef _send_batch(self, int dest):
        self._start_alone(dest, self._batches.pop(dest))

    cdef _grow(self):
        cdef Py_ssize_t cap = self._cap * 2
        self._req = <MPI_Request*>_resized(self._req, cap * sizeof(MPI_Request))
        self._size = <Py_ssize_t*>_resized(self._size, cap * sizeof(Py_ssize_t))
        self._dest = <int*>_resized(self._dest, cap * sizeof(int))
        self._seq = <uint64_t*>_resized(self._seq, cap * sizeof(uint64_t))
        self._cap = cap

    cdef _wait_for_room(self, Py_ssize_t size):
        # Never refuse a single message larger than the bound: it goes alone once all before it are out.
        while self._n and self._inflight + size > self.max_inflight_bytes:
            self._wait_some_sends()

    cdef _push(self, MPI_Request req, Py_ssize_t size, int dest, uint64_t seq, object keep):
        if self._n == self._cap:
            self._grow()
        self._req[self._n] = req
        self._size[self._n] = size
        self._dest[self._n] = dest
        self._seq[self._n] = seq
        self._n += 1
        self._keep.append(keep)
        self._inflight += size

    cdef _issend_header(self, int dest, object data, const char* ptr, Py_ssize_t size):
        """Synchronous-mode send of one header message: it completes once the peer matched it."""
        cdef MPI_Request req
        if size > 0x7FFFFFFF:
            raise ValueError(f"a header message of {size} bytes")
        _check(MPI_Issend(ptr, <int>size, MPI_BYTE, dest, _HEADER_TAG, self._comm, &req))
        self._next_seq += 1
        self._last_seq[dest] = self._next_seq
        self._last_req[dest] = req
        self._last_done[dest] = 0
        self._push(req, size, dest, self._next_seq, data)  # the buffer must outlive the request
        self.bytes_sent += size
        self.mpi_messages_sent += 1

    cdef _start_alone(self, int dest, object data):
        """:meth:`_start` for a header message without buffers (bytes or a batch's bytearray)."""
        cdef Py_ssize_t size = len(data)
        self._wait_for_room(size)
        if type(data) is bytes:
            self._issend_header(dest, data, PyBytes_AS_STRING(data), size)
        else:
            self._issend_header(dest, data, PyByteArray_AS_STRING(data), size)

    cdef _start(self, int dest, list frames):
        """Start the MPI sends of one header message and its buffers (may wait for room)."""
        if not 0 <= dest < self._world:
            raise ValueError(f"destination rank {dest} is not in a communicator of {self._world}")
        cdef list views = [memoryview(f).cast("B") if _nbytes(f) else memoryview(b"") for f in frames]
        cdef Py_ssize_t size = 0
        cdef object v
        cdef Py_buffer buf
        cdef MPI_Request req
        for v in views:
            size += len(v)
        self._wait_for_room(size)
        PyObject_GetBuffer(views[0], &buf, PyBUF_SIMPLE)
        try:
            self._issend_header(dest, views[0], <const char*>buf.buf, buf.len)
        finally:
            PyBuffer_Release(&buf)
        self.bytes_sent += size - len(views[0])
        for v in views[1:]:
            if len(v) > 0x7FFFFFFF:
                raise ValueError(f"a buffer of {len(v)} bytes: over MPI's int count")
            PyObject_GetBuffer(v, &buf, PyBUF_SIMPLE)
            try:
                _check(MPI_Isend(buf.buf, <int>buf.len, MPI_BYTE, dest, _BUFFER_TAG, self._comm, &req))
            finally:
                PyBuffer_Release(&buf)
            self._push(req, len(v), dest, 0, v)  # the memoryview holds the frame's buffer

    def progress(self):
        """Retire completed sends, then send every waiting batch (an idle point)."""
        if self._n:
            self._retire()
        if self._batches:
            for dest in list(self._batches):
                self._send_batch(dest)

    cdef bint _retire(self) except -1:
        """Forget the sends that have completed; True if any had."""
        cdef Py_ssize_t i, j = 0, n = self._n
        cdef int flag, d
        cdef bint done = False
        for i in range(n):
            flag = 0
            _check(MPI_Test(&self._req[i], &flag, MPI_STATUS_IGNORE))
            if flag:
                done = True
                self._inflight -= self._size[i]
                d = self._dest[i]
                if self._seq[i] != 0 and self._last_seq[d] == self._seq[i]:
                    self._last_done[d] = 1
                    self._last_req[d] = MPI_REQUEST_NULL
            else:
                if j != i:
                    self._req[j] = self._req[i]
                    self._size[j] = self._size[i]
                    self._dest[j] = self._dest[i]
                    self._seq[j] = self._seq[i]
                    self._keep[j] = self._keep[i]
                j += 1
        if done:
            del self._keep[j:]
            self._n = j
        return done

    cdef _wait_some_sends(self):
        if self._retire() or not self._n:
            return
        # Keep receiving while we wait: the peer we wait on may be blocked sending to us.
        got = self._receive()
        if got is not None:
            self._inbox.append(got)
        else:
            time.sleep(0)  # yield the core to the peer process on an oversubscribed node

    def flush(self, timeout_s=None):
        """Block until every send has completed (incoming messages are queued meanwhile)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.progress()
        while self._n:
            self._wait_some_sends()
            if deadline is not None and time.monotonic() > deadline and self._n:
                raise TimeoutError(f"{self._n} MPI sends still pending after {timeout_s} s")

    # ---------------------------------------------------------------- receiving

    def poll(self):
        """The next received message (or batch), or None at once if none has arrived."""
        return self._poll()

    cdef object _poll(self):
        if self._inbox:
            return self._inbox.popleft()
        got = self._receive()
        if got is None and self._batches:  # an idle point: nothing of ours may wait
            self.progress()
        return got

    def mailbox_path(self, ready, list senders, dict ranks, rank_of, envelope):
        """:meth:`Mailbox.send` and :meth:`Mailbox.poll` over this transport, compiled (see MailboxPath)."""
        return MailboxPath(self, ready, senders, ranks, rank_of, envelope)

    cdef object _receive(self):
        """Receive one header message (a message or a batch), if one has come."""
        if self.closed:
            return None
        cdef int flag = 0, count = 0, source, slot = self._head
        cdef MPI_Status status
        cdef uint32_t word
        cdef const char* mem = self._slot_mem[slot]
        cdef object header, data
        cdef list headers, buffers
        cdef Py_ssize_t offset, n
        _check(MPI_Test(&self._slots[slot], &flag, &status))
        if not flag:
            return None
        self._head = (slot + 1) % _SLOTS
        source = status.MPI_SOURCE
        _check(MPI_Get_count(&status, MPI_BYTE, &count))
        self.bytes_received += count
        if count < 4:
            _check(MPI_Start(&self._slots[slot]))
            raise RuntimeError(f"MPI transport: a {count}-byte header message from rank {source}")
        # Copy out what the message needs, then post the slot again at once.
        word = _word(mem)
        if word == _BATCH:
            data = PyBytes_FromStringAndSize(mem, count)
        elif not word & _LARGE:
            header = PyBytes_FromStringAndSize(mem + 4, count - 4)
        _check(MPI_Start(&self._slots[slot]))
        if word == _BATCH:
            headers = []
            offset = 4
            mem = PyBytes_AS_STRING(data)
            while offset + 4 <= count:
                n = _word(mem + offset)
                offset += 4 + n
                if offset > count:
                    break
                headers.append(data[offset - n : offset])
            if offset != count:
                raise RuntimeError(f"MPI transport: a batch from rank {source} is cut short")
            return _tuple_new(Received, (source, headers, _NO_BUFFERS))
        buffers = _NO_BUFFERS
        if word & _LARGE:
            word &= ~_LARGE
            header = self._take_buffer(source, False)
        if word:
            buffers = [self._take_buffer(source, True) for _ in range(word)]
        return _tuple_new(Received, (source, [header], buffers))

    cdef object _take_buffer(self, int source, bint pooled):
        """The next BUFFER_TAG message from ``source`` (its sender started it with the header).

        In C: through mpi4py's objects this was 100+ µs right after a large receive had swept
        the caches, ahead of the next large copy."""
        cdef MPI_Message message
        cdef MPI_Status status
        cdef int count = 0, ierr
        cdef char* mem
        with nogil:  # blocking, as mpi4py's: other threads run meanwhile
            ierr = MPI_Mprobe(source, _BUFFER_TAG, self._comm, &message, &status)
        _check(ierr)
        _check(MPI_Get_count(&status, MPI_BYTE, &count))
        # Matched: only this call can receive it now (a MemoryError here would strand it).
        buf = self._buffers._take(count) if pooled else bytearray(count)
        mem = _writable_address(buf)
        with nogil:
            ierr = MPI_Mrecv(mem, count, MPI_BYTE, &message, MPI_STATUS_IGNORE)
        _check(ierr)
        self.bytes_received += count
        return buf

    # ----------------------------------------------------------------- shutdown

    def close(self):
        """Cancel the posted slots; the number of messages found in them (then dropped)."""
        if self.closed:
            return 0
        self.closed = True
        cdef int i, cancelled, dropped = 0
        cdef MPI_Status status
        for i in range(_SLOTS):
            _check(MPI_Cancel(&self._slots[i]))
            _check(MPI_Wait(&self._slots[i], &status))
            cancelled = 0
            _check(MPI_Test_cancelled(&status, &cancelled))
            if not cancelled:
                dropped += 1
            _check(MPI_Request_free(&self._slots[i]))
        return dropped


# ------------------------------------------------------------------ the mailbox's path

# The codec for plain messages (transports/codec.py, plain_message_spec): their map packed
# and checked here, every other message handed to the codec itself. Control messages are
# plain (WeightsPushed, BatchDone, Stop, ...), and for them the codec's Python was most of a
# round trip once the transport was compiled.
cdef object _encode_frames = _codec.encode_frames
cdef object _decode = _codec.decode
cdef object _plain_spec = _codec.plain_message_spec
cdef object _registered_types = _codec.registered_types
cdef object _object_new = object.__new__
# Only the scalars of plain_message_spec reach it: msgspec packs them as msgpack's Packer does
# (the smallest int, float64, str and bin types), at half its cost per call.
cdef object _pack_map = msgspec.msgpack.Encoder().encode
cdef object _astuple = msgspec.structs.astuple


cdef class _Plain:
    cdef bytes prefix  # the map header counting "type" and "v", and those two entries
    cdef Py_ssize_t skip  # the size of the fields' own map header, which the prefix replaces
    cdef tuple names
    cdef tuple allowed  # per field, a frozenset of the exact types it takes
    cdef object cls
    cdef Py_ssize_t n
    # msgspec's decoder of the fields into a struct that mirrors the class (each field typed
    # as the union of exactly what it allows), or None where msgspec cannot express that.
    cdef object read_fields


def _fields_reader(tuple names, tuple allowed):
    """``decode(bytes) -> struct`` for a map holding ``names`` (and "type" and "v", which it
    skips), each value of exactly one of its ``allowed`` types, or None if msgspec cannot
    check that. msgspec's checks are exact where they matter here: an int field refuses a
    bool, ``int | float`` keeps an int an int (a bare ``float`` would not), bytes refuses str."""
    if "type" in names or "v" in names:
        return None
    try:
        fields = [(n, Union[tuple(None if t is type(None) else t for t in a)]) for n, a in zip(names, allowed)]
        return msgspec.msgpack.Decoder(msgspec.defstruct("PlainFields", fields)).decode
    except Exception:  # noqa - a name or a union msgspec refuses: the map path decides
        return None


cdef dict _BY_CLASS = {}  # message class -> _Plain, or None if not plain


cdef _Plain _plain_for_class(cls):
    cdef _Plain spec = None
    try:
        return _BY_CLASS[cls]
    except KeyError:
        pass
    got = _plain_spec(cls)
    if got is not None:
        spec = _Plain()
        _, spec.prefix, spec.skip, spec.names, spec.allowed = got
        spec.cls = cls
        spec.n = len(spec.names)
        spec.read_fields = _fields_reader(spec.names, spec.allowed)
    _BY_CLASS[cls] = spec
    return spec


cdef dict _BY_WIRE_NAME = {}  # a registered class's wire name, UTF-8 -> _Plain, or None


cdef _Plain _plain_for_bytes(bytes data):
    """The plain class whose exact prefix ``data`` starts with (map header, "type", its name,
    "v", this version: what encode_frames writes), or None. Read from the bytes, before any
    decoding, so that a plain message is decoded once, straight into its fields."""
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = len(data), at, length
    cdef _Plain spec
    if size < 1:
        return None
    if 0x80 <= p[0] <= 0x8F:  # fixmap
        at = 1
    elif p[0] == 0xDE:  # map16
        at = 3
    else:
        return None
    if size < at + 6 or memcmp(p + at, b"\xa4type", 5) != 0:
        return None
    at += 5
    if 0xA0 <= p[at] <= 0xBF:  # fixstr
        length = p[at] & 0x1F
        at += 1
    elif p[at] == 0xD9 and size > at + 1:  # str8
        length = p[at + 1]
        at += 2
    else:
        return None
    if size < at + length:
        return None
    key = PyBytes_FromStringAndSize(<const char*>p + at, length)
    try:
        spec = _BY_WIRE_NAME[key]
    except KeyError:
        try:
            cls = _registered_types().get(key.decode())  # a copy, but once per name
        except UnicodeDecodeError:
            return None
        if cls is None:  # not (yet) a message type: never cached, garbage must not grow it
            return None
        spec = _BY_WIRE_NAME[key] = _plain_for_class(cls)
    if spec is None or spec.read_fields is None:
        return None
    if size < len(spec.prefix) or memcmp(p, PyBytes_AS_STRING(spec.prefix), len(spec.prefix)) != 0:
        return None
    return spec


cdef inline bint _fields_fit(_Plain spec, dict fields):
    """Whether ``fields`` holds every field of ``spec``, each of a type it allows exactly."""
    cdef Py_ssize_t i
    cdef PyObject* value
    for i in range(spec.n):
        value = PyDict_GetItem(fields, spec.names[i])
        if value == NULL or type(<object>value) not in <frozenset>spec.allowed[i]:
            return False
    return True


cpdef list encode_frames(msg):
    """:func:`transports.codec.encode_frames`, the same bytes, plain messages packed here."""
    cdef _Plain spec = _plain_for_class(type(msg))
    if spec is None:
        return _encode_frames(msg)
    fields = getattr(msg, "__dict__", None)
    # The codec packs the instance dict as it is when it holds just the fields; so here.
    if type(fields) is not dict or len(<dict>fields) != spec.n or not _fields_fit(spec, <dict>fields):
        return _encode_frames(msg)
    try:
        body = _pack_map(fields)
    except Exception:  # noqa - e.g. an int past 64 bits: the codec raises its own error
        return _encode_frames(msg)
    cdef Py_ssize_t head = len(spec.prefix), size = len(body) - spec.skip
    out = PyBytes_FromStringAndSize(NULL, head + size)
    memcpy(PyBytes_AS_STRING(out), PyBytes_AS_STRING(spec.prefix), head)
    memcpy(PyBytes_AS_STRING(out) + head, PyBytes_AS_STRING(body) + spec.skip, size)
    return [out]


cpdef object decode(data, buffers=()):
    """:func:`transports.codec.decode`, the same messages and errors, plain ones read here."""
    cdef _Plain spec
    cdef Py_ssize_t i
    if not buffers and type(data) is bytes:
        spec = _plain_for_bytes(<bytes>data)
        if spec is not None:
            # The prefix fixed the field count (n + 2), the type and the version; the reader
            # checks each field's presence and exact type. A map that fails (a field missing,
            # or of another type) goes to the codec, which names the problem.
            try:
                values = _astuple(spec.read_fields(data))
            except Exception:  # noqa - msgspec's ValidationError or DecodeError
                values = None
            if values is not None:
                # What the codec's builder does for a plain class: the instance without
                # __init__, then each field set in order.
                msg = _object_new(spec.cls)
                for i in range(spec.n):
                    setattr(msg, spec.names[i], values[i])
                return msg
    return _decode(data, buffers)


cpdef list decode_many(datas):
    """:func:`transports.codec.decode_many`: each message, or the exception decoding it raised."""
    cdef list out = []
    for data in datas:
        try:
            out.append(decode(data))
        except Exception as e:
            out.append(e)
    return out


cdef class MailboxPath:
    """``Mailbox.send`` and ``Mailbox.poll`` (runtime/mailbox.py), line for line, in C.

    A mailbox on the compiled transport takes these two as its own (runtime/mailbox.py says
    why): with the transport in C, the Python frames of those two methods were a third of a
    round trip. The state is the mailbox's own objects, shared, not copies; messages are
    encoded and decoded with this module's plain-message path.
    """

    cdef FastTransport transport
    cdef object ready  # the mailbox's deque of decoded envelopes not yet polled
    cdef list senders
    cdef dict ranks
    cdef object rank_of
    cdef object envelope

    def __init__(self, FastTransport transport not None, ready, list senders, dict ranks, rank_of, envelope):
        self.transport = transport
        self.ready = ready
        self.senders = senders
        self.ranks = ranks
        self.rank_of = rank_of
        self.envelope = envelope

    def send(self, to, msg):
        rank = self.ranks.get(to)
        if rank is None:
            role, index = to
            rank = self.ranks[to] = self.rank_of(role, index)
        self.transport._send(rank, encode_frames(msg))

    def poll(self):
        ready = self.ready
        if not ready:
            got = self.transport._poll()
            if got is None:
                return None
            source, headers, buffers = got
            if len(headers) == 1:
                return _tuple_new(self.envelope, (self.senders[source], decode(headers[0], buffers)))
            sender = self.senders[source]
            ready.extend([_tuple_new(self.envelope, (sender, m)) for m in decode_many(headers)])
        env = ready.popleft()
        if isinstance(env[1], Exception):
            raise env[1]
        return env
