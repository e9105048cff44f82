# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The codec for plain messages, compiled: the bytes and messages of transports/codec, faster.

A plain message (``codec.plain_message_spec``: a plain dataclass of scalar fields) has its map
packed and checked here; every other message is handed to the codec itself. Control messages
are plain (WeightsPushed, BatchDone, Stop, ...), and for them the codec's Python was most of a
mailbox round trip once the transport was compiled. runtime/fast_mailbox.pyx cimports these
functions (fast_codec.pxd); built by ``python -m transports.build`` with the transport.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.string cimport memcmp, memcpy

from typing import Union

import msgspec
import msgspec.structs

from transports import codec as _codec

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

