# The compiled transport's classes, declared for the modules that call them in C
# (runtime/fast_mailbox.pyx calls FastTransport._send and _poll without a Python call).

from libc.stdint cimport uint64_t
from mpi4py.libmpi cimport MPI_Comm, MPI_Request

from transports.fast_buffers cimport ReceiveBuffers


cdef class FastTransport:
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

    cdef _send(self, int dest, frames)
    cdef bint _peer_took_all(self, int dest) except -1
    cdef _send_batch(self, int dest)
    cdef _grow(self)
    cdef _wait_for_room(self, Py_ssize_t size)
    cdef _push(self, MPI_Request req, Py_ssize_t size, int dest, uint64_t seq, object keep)
    cdef _issend_header(self, int dest, object data, const char* ptr, Py_ssize_t size)
    cdef _start_alone(self, int dest, object data)
    cdef _start(self, int dest, list frames)
    cdef bint _retire(self) except -1
    cdef _wait_some_sends(self)
    cdef object _poll(self)
    cdef object _receive(self)
    cdef object _take_buffer(self, int source, bint pooled)
