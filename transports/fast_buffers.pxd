# The receive-buffer pool's classes, declared for transports/fast_transport.pyx, which takes
# buffers from it and writes into them in C.


cdef class _Block:
    cdef object owner
    cdef char* ptr
    cdef Py_ssize_t nbytes


cdef class ReceiveBuffer:
    cdef _Block block  # None until a pool lends one: only ReceiveBuffers.take makes them
    cdef ReceiveBuffers pool


cdef class ReceiveBuffers:
    cdef readonly Py_ssize_t min_bytes
    cdef readonly Py_ssize_t max_free_bytes
    cdef readonly Py_ssize_t free_bytes
    cdef dict _free  # nbytes -> list of _Block

    cdef object _take(self, Py_ssize_t nbytes)
    cdef _give_back(self, _Block block)
