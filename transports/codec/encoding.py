"""Encoding a registered message: its map packed with a reused Packer, arrays as extensions."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import numpy as np

from transports.codec.arrays import _Encoder, _is_ragged, _Ragged
from transports.codec.registry import SCHEMA_VERSION, CodecError
from transports.codec.validation import _hints, _may_hold_list

# Encoders not in use, taken for one pack and given back: a Packer is neither thread-safe nor
# reentrant, and a list's pop() and append() are atomic, so every call (on any thread, or
# re-entered from a hook on this one) packs with an encoder of its own, without a lock or a
# flag. Indexed by ``out_of_band``.
_IDLE_ENCODERS: tuple[list, list] = ([], [])


def _pack(msg, out_of_band: bool) -> list:
    """``[packed bytes, *out-of-band buffers]`` of a registered message."""
    cls = type(msg)
    try:
        prefix, skip, type_name, names, list_fields = _ENCODE_SPECS[cls]
    except KeyError:
        prefix, skip, type_name, names, list_fields = _encode_spec(cls)
    fields = getattr(msg, "__dict__", None)
    if fields is None or len(fields) != len(names):
        # Not the usual dataclass instance, whose dict holds just the fields (its __init__
        # set them all; had one been deleted and another attribute set, the receiver would
        # refuse the message, naming the stray field): build the map field by field.
        fields = {"type": type_name, "v": SCHEMA_VERSION}
        for name in names:
            fields[name] = getattr(msg, name)
        prefix = None
    # Only a field whose hint admits a list can hold a ragged one (a value that contradicts
    # its hint still encodes, the plain way, and the receiver refuses it, naming the field).
    for name in list_fields:
        value = fields.get(name)
        if type(value) is list and value and type(value[0]) is np.ndarray and _is_ragged(value):
            fields = {
                k: (
                    _Ragged(v)
                    if k in list_fields and type(v) is list and v and type(v[0]) is np.ndarray and _is_ragged(v)
                    else v
                )
                for k, v in fields.items()
            }  # a copy: the message is not touched
            break
    idle = _IDLE_ENCODERS[out_of_band]
    try:
        enc = idle.pop()
    except IndexError:
        enc = _Encoder(out_of_band)
    try:
        packed = enc.packer.pack(fields)
        frames = enc.frames
        if frames:
            enc.frames = []
    except BaseException:
        enc.frames = []  # a Packer starts afresh after an exception (autoreset)
        raise
    finally:
        idle.append(enc)
    if prefix is not None:
        # The instance dict packed as it is, then its map header swapped for one that also
        # counts "type" and "v", and those two entries, packed once per class.
        packed = prefix + packed[skip:]
    return [packed, *frames] if frames else [packed]


# Per message class: (packed map header and "type"/"v" entries, size of the map header of
# the fields alone, wire name, field names, names of the fields that may hold a list), worked
# out on first use.
_ENCODE_SPECS: dict[type, tuple] = {}


def _encode_spec(cls) -> tuple:
    type_name = getattr(cls, "__message_type__", None)
    if type_name is None:
        raise CodecError(f"{cls.__name__} is not a registered message type")
    names = tuple(f.name for f in dataclasses.fields(cls))

    def map_header(n: int) -> bytes:  # msgpack's fixmap or map16 (a message has < 65536 fields)
        return bytes([0x80 | n]) if n < 16 else b"\xde" + n.to_bytes(2, "big")

    prefix = (
        map_header(len(names) + 2)
        + msgpack.packb("type")
        + msgpack.packb(type_name)
        + msgpack.packb("v")
        + msgpack.packb(SCHEMA_VERSION)
    )
    try:
        hints = _hints(cls)
        list_fields = tuple(n for n in names if _may_hold_list(hints.get(n, Any)))
    except Exception:  # noqa: BLE001 - hints that do not resolve: any field may hold a list
        list_fields = names
    spec = _ENCODE_SPECS[cls] = (prefix, len(map_header(len(names))), type_name, names, list_fields)
    return spec


def encode(msg) -> bytes:
    """Encode a registered message into one self-contained byte string."""
    return _pack(msg, False)[0]


def encode_frames(msg) -> list:
    """Encode into ``[header, *buffers]``: large arrays are left as raw buffers (no copy)."""
    return _pack(msg, True)
