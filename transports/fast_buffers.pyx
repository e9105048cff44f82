# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled transport's pool of large receive buffers (transports/fast_transport.pyx takes
its large frames from it): memory lent to the application and given back when the last view of
it is gone. Its C attributes are declared in fast_buffers.pxd."""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer

import numpy as np


cdef class _Block:
    """Memory for one large frame: a numpy array (numpy asks the kernel for huge pages on big
    allocations, as the raw receiver's buffer gets) and its address."""

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
    and an ``np.asarray`` per loan, which costs more on the path of every large message, most
    right after a large receive has swept the caches."""

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
