"""The codec's array and tensor extensions (transports/codec/arrays.py): round trips of every dtype
and shape on both wire paths, out-of-band buffers, ragged lists, and the named CodecError for
every malformed extension."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
import torch

from support.codec_messages import (
    PATHS,
    AnyMsg,
    RaggedMsg,
    _ragged_ext_count,
    assert_same,
    body,
    pack,
    roundtrip,
    wire_frames,
)
from transports import codec
from transports.codec import CodecError, arrays

NP_DTYPES = ["int32", "int64", "float32", "float16", "float64", "bool", "uint8"]


TORCH_DTYPES = [
    torch.int32,
    torch.int64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.bool,
    torch.uint8,
]


SHAPES = [(), (0,), (1,), (7,), (3, 0, 2), (2, 3, 4), (40_000,)]  # (40_000,) crosses the OOB threshold


def np_array(dtype: str, shape) -> np.ndarray:
    rng = np.random.default_rng(0)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if np.dtype(dtype).kind == "f":
        a = rng.standard_normal(n).astype(dtype)
        if n > 2:
            a[1], a[2] = np.nan, -np.inf
        return a.reshape(shape)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True).reshape(shape)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_numpy_roundtrip(dtype, shape, path):
    a = np_array(dtype, shape)
    got = roundtrip(AnyMsg(a), path).x
    assert_same(got, a)
    if got.size:
        got.reshape(-1)[0] = got.reshape(-1)[-1]  # decoded arrays are the receiver's to modify


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_roundtrip(dtype, shape, path):
    n = int(np.prod(shape, dtype=np.int64))
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        t = torch.randint(0, 2, (n,), generator=g).bool()
    elif dtype.is_floating_point:
        t = torch.randn(n, generator=g).to(dtype)
    else:
        t = torch.randint(0, 250, (n,), generator=g).to(dtype)
    t = t.reshape(shape)
    got = roundtrip(AnyMsg(t), path).x
    assert_same(got, t)
    if got.numel():
        got.view(-1)[0] = 0  # writable, and not the sender's memory
        assert got.data_ptr() != t.data_ptr()


@pytest.mark.parametrize("path", PATHS)
def test_bfloat16_bits_survive(path):
    # NaN, -inf, a subnormal, 1.0, about -123.5
    bits = torch.from_numpy(np.array([0x7FC0, 0xFF80, 0x0001, 0x3F80, 0xC2F7], np.uint16).view(np.int16))
    t = bits.view(torch.bfloat16)
    got = roundtrip(AnyMsg(t), path).x
    assert got.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.int16), bits)


@pytest.mark.parametrize("path", PATHS)
def test_noncontiguous_and_byteswapped(path):
    base = np.arange(200_000, dtype=np.float32).reshape(400, 500)
    for a in (base[:, ::3], base.T, base[::-2], np.arange(20, dtype=">i4")):
        assert_same(roundtrip(AnyMsg(a), path).x, np.ascontiguousarray(a))
    t = torch.arange(60_000, dtype=torch.float32).reshape(200, 300).t()
    assert_same(roundtrip(AnyMsg(t), path).x, t.contiguous())
    t = torch.ones(3, requires_grad=True) * 2
    assert_same(roundtrip(AnyMsg(t), path).x, t.detach())


def test_frames_layout_small_inband_large_out_of_band():
    small = np.zeros(codec.OOB_THRESHOLD_BYTES - 1, np.uint8)
    large = np.zeros(codec.OOB_THRESHOLD_BYTES, np.uint8)
    assert len(codec.encode_frames(AnyMsg(small))) == 1
    frames = codec.encode_frames(AnyMsg([large, small, large]))
    assert len(frames) == 3
    assert len(frames[0]) < codec.OOB_THRESHOLD_BYTES + 1024  # the header holds only the small one
    # Out-of-band frames are views of the sender's memory, not copies.
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), large)


@pytest.mark.parametrize(
    "dtype",
    ["<f4", ">f4", "complex64", "bool", "<M8[s]", "<m8[ns]"],  # datetimes: numpy exports no buffer for them
)
def test_an_out_of_band_array_is_its_bytes_in_order_for_any_dtype(dtype):
    rows = codec.OOB_THRESHOLD_BYTES // np.dtype(dtype).itemsize // 4 + 1
    a = np.arange(4 * rows).astype(dtype).reshape(4, rows)  # 2-d, at least the threshold
    frames = codec.encode_frames(AnyMsg(a))
    assert len(frames) == 2 and memoryview(frames[1]).nbytes == a.nbytes
    assert bytes(memoryview(frames[1]).cast("B")) == a.tobytes()
    got = codec.decode(*wire_frames(frames)).x
    assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a)


@pytest.mark.parametrize("path", PATHS)
def test_256_mib_array(path):
    n = 64 * 1024 * 1024  # 64 Mi float32 = 256 MiB
    a = np.arange(n, dtype=np.uint32).view(np.float32)
    if path == "encode":
        data = codec.encode(AnyMsg(a))
        assert len(data) > a.nbytes
        got = codec.decode(data).x
        del data
    else:
        frames = codec.encode_frames(AnyMsg(a))
        assert len(frames) == 2 and memoryview(frames[1]).nbytes == a.nbytes and len(frames[0]) < 200
        got = codec.decode(bytes(frames[0]), [np.frombuffer(frames[1], np.uint8)]).x
        del frames
    assert got.dtype == np.float32 and got.shape == (n,)
    assert np.array_equal(got.view(np.uint32), a.view(np.uint32))


def array_ext(header: list, payload: bytes) -> msgpack.ExtType:
    h = msgpack.packb(header)
    return msgpack.ExtType(arrays._EXT_ARRAY, len(h).to_bytes(4, "little") + h + payload)


@pytest.mark.parametrize("nbytes", [0, 11, 13, 400])
def test_inband_array_payload_of_wrong_size(nbytes):
    ext = array_ext(["<i4", [3], False], b"\x00" * nbytes)  # 3 int32 need 12 bytes
    with pytest.raises(CodecError, match=f"array payload is {nbytes} bytes .* need 12"):
        codec.decode(pack(body(ids=ext)))


def test_out_of_band_array_payload_of_wrong_size():
    a = np.arange(codec.OOB_THRESHOLD_BYTES, dtype=np.int32)
    header, bufs = wire_frames(codec.encode_frames(AnyMsg(a)))
    with pytest.raises(CodecError, match="array payload is .* bytes"):
        codec.decode(header, [bufs[0][:-4]])
    with pytest.raises(CodecError, match="refers to buffer 0 but 0 came with it"):
        codec.decode(header, [])


@pytest.mark.parametrize(
    "header",
    [["no-such-dtype", [3], False], ["<i4", "three", False], ["<i4"], "not-a-list", ["|O", [1], False]],
    ids=["dtype", "shape", "short", "not-list", "object"],
)
def test_malformed_array_header(header):
    with pytest.raises(CodecError):
        codec.decode(pack(body(ids=array_ext(header, b"\x00" * 8))))


def test_unknown_extension_code():
    with pytest.raises(CodecError, match="unknown msgpack extension code 42"):
        codec.decode(pack(body(ids=msgpack.ExtType(42, b"xx"))))


# A list of small 1-d arrays of one dtype (a group's responses, their log-probs) travels as one
# extension: the same arrays come out, at a fraction of the per-array cost.


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", ["int32", "float32", "int64", "float64", "uint8", "bool", ">i4"])
def test_a_ragged_list_round_trips(path, dtype):
    rng = np.random.default_rng(0)
    arrays = [(rng.random(n) * 100).astype(dtype) for n in (3, 0, 7, 1)]
    msg = RaggedMsg(ids=arrays, other=[arrays[0], np.arange(2, dtype=np.float16)])  # two dtypes: plain
    assert _ragged_ext_count(codec.encode(msg)) == 1
    got = roundtrip(msg, path)
    assert_same(got.ids, arrays)
    assert_same(got.other, msg.other)
    got.ids[0][:] = 0  # writable, and each array is its own: the next one is untouched
    assert_same(got.ids[2], arrays[2])


@pytest.mark.parametrize(
    "ids",
    [
        [np.arange(3)],  # one array: nothing to share
        [np.arange(3), np.arange(4).reshape(2, 2)],  # not all 1-d
        [np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int64)],  # two dtypes
        [np.arange(3), [1, 2]],  # not all arrays
        [np.zeros(codec.OOB_THRESHOLD_BYTES // 8), np.zeros(8)],  # large: out-of-band instead
        [np.arange(6)[::2], np.arange(3)],  # a strided view
    ],
    ids=["single", "2d", "dtypes", "non-array", "large", "strided"],
)
def test_lists_that_are_not_ragged_take_the_plain_path(ids):
    msg = RaggedMsg(ids=[], other=ids)
    assert _ragged_ext_count(codec.encode(msg)) == 0
    for path in PATHS:
        assert_same(roundtrip(msg, path).other, ids)


def test_the_message_itself_is_not_changed_by_encoding():
    arrays = [np.arange(3), np.arange(4)]
    msg = RaggedMsg(ids=arrays)
    codec.encode(msg)
    assert msg.ids is arrays and all(type(a) is np.ndarray for a in msg.ids)


def ragged_ext(dtype: str, lengths, payload: bytes) -> msgpack.ExtType:
    h = msgpack.packb([dtype, lengths])
    return msgpack.ExtType(arrays._EXT_RAGGED, len(h).to_bytes(4, "little") + h + payload)


@pytest.mark.parametrize(
    "ext,match",
    [
        (msgpack.ExtType(arrays._EXT_RAGGED, b"\x01"), "truncated"),
        (ragged_ext("<i4", [2, 1], bytes(8)), "holds 8 bytes but its lengths need 12"),
        (ragged_ext("<i4", [2, -1], bytes(4)), "bad lengths"),
        (ragged_ext("<i4", "2", bytes(8)), "bad lengths"),
        (ragged_ext("no-such-dtype", [1], bytes(4)), "malformed header"),
        (ragged_ext("|O", [1], bytes(8)), "malformed header"),
        (msgpack.ExtType(arrays._EXT_RAGGED, (3).to_bytes(4, "little") + b"\xc1\xc1\xc1"), "malformed header"),
    ],
    ids=["truncated", "short", "negative", "not-a-list", "dtype", "object", "garbage"],
)
def test_a_malformed_ragged_list_is_a_codec_error(ext, match):
    data = msgpack.packb({"type": "CodecTestRagged", "v": codec.SCHEMA_VERSION, "ids": ext, "other": None})
    with pytest.raises(CodecError, match=match):
        codec.decode(data)
