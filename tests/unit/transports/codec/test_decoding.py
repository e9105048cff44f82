"""Decoding bytes (transports/codec/decoding.py): every kind of malformed input is a named CodecError."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from support.codec_messages import (
    Typed,
    typed,
)
from transports import codec
from transports.codec import CodecError


def test_every_truncation_is_a_codec_error():
    data = codec.encode(typed(ids=np.arange(40, dtype=np.int64), note="n"))
    assert isinstance(codec.decode(data), Typed)
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            codec.decode(data[:cut])
    with pytest.raises(CodecError, match="truncated"):
        codec.decode(data[:-5])


def test_trailing_bytes():
    with pytest.raises(CodecError, match="trailing bytes"):
        codec.decode(codec.encode(typed()) + b"\x00")


@pytest.mark.parametrize("decode", [codec.decode, lambda data: _raise_first(codec.decode_many([data]))])
def test_nesting_past_the_interpreters_limit_is_a_codec_error(decode):
    # An AnyMsg whose x is 100,000 one-element arrays inside each other (100 kB): the decoder
    # recurses per level. The map of type and v, its header (0x82) made one of 3 entries.
    type_and_v = msgpack.packb({"type": "CodecTestAny", "v": codec.SCHEMA_VERSION})
    data = b"\x83" + type_and_v[1:] + msgpack.packb("x") + b"\x91" * 100_000 + b"\x01"
    with pytest.raises(CodecError, match="nested too deep"):
        decode(data)


def _raise_first(results: list):
    if isinstance(results[0], Exception):
        raise results[0]
    return results[0]


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\xc1",
        b"\xff" * 16,
        b"\x00",
        bytes(range(256)),
        b"hello world",
        msgpack.packb([1, 2, 3]),
        msgpack.packb("type"),
    ],
    ids=["empty", "never-used-byte", "ff", "int", "ramp", "text", "list", "string"],
)
def test_garbage_is_a_codec_error(garbage):
    with pytest.raises(CodecError):
        codec.decode(garbage)


def test_random_garbage_never_escapes_as_another_exception():
    rng = np.random.default_rng(1)
    good = codec.encode(typed())
    for _ in range(300):
        data = bytearray(good)
        for i in rng.integers(0, len(data), 3):
            data[i] = int(rng.integers(0, 256))
        try:
            codec.decode(bytes(data))
        except CodecError:
            pass


def test_not_a_map():
    with pytest.raises(CodecError, match="must be a map"):
        codec.decode(msgpack.packb([1, 2]))
