# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""``Mailbox.send`` and ``Mailbox.poll`` (runtime/mailbox.py), line for line, in C.

A mailbox on the compiled transport takes these two as its own (runtime/mailbox.py says
why). They call the transport's C methods (transports/fast_transport.pxd) and the compiled
plain-message codec (transports/fast_codec.pxd) without a Python call between. Built by
``python -m transports.build`` with the transport, and used only beside it.
"""

from transports.fast_codec cimport decode, decode_many, encode_frames
from transports.fast_transport cimport FastTransport

cdef object _tuple_new = tuple.__new__


cdef class MailboxPath:
    """The state is the mailbox's own objects, shared, not copies."""

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
