"""Decoding bytes (and out-of-band buffers) into registered messages, validating everything."""

from __future__ import annotations

from typing import Any

import msgspec

from transports.codec.arrays import _decoding, _ext_hook
from transports.codec.builders import _BUILDERS, _builder_for
from transports.codec.registry import CodecError
from transports.codec.validation import _from_map

# Maps are read by msgspec's decoder, not msgpack's unpackb: the same bytes to the same values
# (maps keyed by int too: they encode, so must decode; field names are checked to be strings in
# _from_map), in a third of the time, and this is on every message's path. Encoding stays with
# msgpack's Packer, which packs a message's map as fast.
_decode_body = msgspec.msgpack.Decoder(ext_hook=_ext_hook).decode


def _decode_body_with(data, frames):
    _decoding.frames = frames
    try:
        return _decode_body(data)
    finally:
        _decoding.frames = ()


def decode(data, frames=()) -> Any:
    """Decode bytes (plus out-of-band buffers, if any) into a registered message instance."""
    try:
        body = _decode_body_with(data, frames) if frames else _decode_body(data)
    except CodecError:
        raise
    except _UNPACK_ERRORS as e:
        raise _bad_bytes(e) from None
    try:
        build = _BUILDERS[body["type"]]
    except Exception:  # not a map, no or an odd type name, or a type not seen before
        build = _builder_for(body)
    msg = build(body)
    return msg if msg is not None else _from_map(body)


def decode_many(datas) -> list:
    """Decode several buffer-less messages: a list holding each message or, in its place, the
    exception decoding it raised (a :class:`CodecError`, or one from the message class's
    own ``__init__``): one bad message costs no other."""
    out = []
    append = out.append
    decode_body, builders = _decode_body, _BUILDERS
    for data in datas:  # decode(data), inlined: this loop runs once per small message
        try:
            try:
                body = decode_body(data)
            except CodecError:
                raise
            except _UNPACK_ERRORS as e:
                raise _bad_bytes(e) from None
            try:
                build = builders[body["type"]]
            except Exception:
                build = _builder_for(body)
            msg = build(body)
            append(msg if msg is not None else _from_map(body))
        except Exception as e:
            append(e)
    return out


# msgspec.DecodeError is a ValueError; nesting past the interpreter's limit is a RecursionError.
_UNPACK_ERRORS = (ValueError, TypeError, RecursionError)


def _bad_bytes(e: Exception) -> CodecError:
    if isinstance(e, msgspec.DecodeError) and "trailing characters" in str(e):  # msgspec's words for it
        return CodecError("message has trailing bytes after its end")
    if isinstance(e, RecursionError):
        return CodecError("malformed message bytes: nested too deep")
    return CodecError(f"malformed or truncated message bytes: {e}")
