# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The MPI transport of transports/mpi_transport.py, compiled: the same wire, the same rules.

``MPITransport`` there is the reference: its module doc says what goes on the wire, when a
small message is batched and what blocks. This class does exactly that, with the per-message
path (send a header message, poll a slot, retire completed sends) in C calls to MPI on C
arrays instead of Python objects: a round trip of the mailbox spends most of its time in that
Python bookkeeping, not in MPI (bench/mailbox_parts.py). Large frames are received in C into a
pool of its own (``ReceiveBuffers``, transports/fast_buffers.pyx); the rare paths (close) stay close to the Python original.
The mailbox's own send and poll over it are compiled beside the mailbox (runtime/fast_mailbox.pyx).

Built by ``python -m transports.build`` (``make venv`` runs it) against the mpi.h of the MPI
that mpi4py loads; transports/choose.py uses it only when that MPI is the one it was built
for, and ``MPIRL_TRANSPORT=python`` turns it off. Every mailbox test runs with both.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from mpi4py cimport MPI
from mpi4py.libmpi cimport (
    MPI_ANY_SOURCE, MPI_BYTE, MPI_Cancel, MPI_Comm, MPI_Get_count, MPI_Issend, MPI_Isend, MPI_Message, MPI_Mprobe,
    MPI_Mrecv,
    MPI_Recv_init, MPI_Request, MPI_Request_free, MPI_Request_get_status, MPI_REQUEST_NULL,
    MPI_Start, MPI_STATUS_IGNORE, MPI_Status, MPI_SUCCESS, MPI_Test, MPI_Test_cancelled, MPI_Wait,
)

from transports.fast_buffers cimport ReceiveBuffer, ReceiveBuffers

import collections
import time

from mpi4py import MPI as _MPI

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


cdef inline char* _writable_address(object buf):
    """The memory of a bytearray or a ReceiveBuffer."""
    if type(buf) is bytearray:
        return PyByteArray_AS_STRING(buf)
    return (<ReceiveBuffer>buf).block.ptr


cdef class FastTransport:
    """Drop-in for :class:`transports.mpi_transport.MPITransport` (same constructor, methods, counters).
    Its C attributes and methods are declared in fast_transport.pxd."""

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
