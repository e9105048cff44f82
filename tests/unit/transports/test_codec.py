"""The msgpack codec: round trips of every dtype and shape on both wire paths, and the
named CodecError for every kind of malformed input."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import numpy as np
import pytest
import torch

from transports import codec
from transports.codec import CodecError, arrays, encoding


@codec.message(name="CodecTestAny")
class AnyMsg:
    x: Any = None


@codec.message(name="CodecTestTyped")
class Typed:
    n: int
    f: float
    s: str
    ids: np.ndarray
    tags: list[str]
    metrics: dict[str, float]
    note: str | None = None
    b: bytes = b""


def typed(**over) -> Typed:
    base = dict(n=1, f=0.5, s="s", ids=np.arange(3, dtype=np.int32), tags=["a"], metrics={"r": 1.0})
    base.update(over)
    return Typed(**base)


# ------------------------------------------------------------------------ helpers


def wire_frames(frames: list) -> tuple[bytes, list[np.ndarray]]:
    """What the MPI transport hands to the receiver: a bytes header and fresh uint8 buffers."""
    header, *bufs = frames
    return bytes(header), [np.frombuffer(bytearray(memoryview(b).cast("B")), dtype=np.uint8) for b in bufs]


def roundtrip(msg, path: str):
    if path == "encode":
        data = codec.encode(msg)
        assert isinstance(data, bytes)
        return codec.decode(data)
    header, bufs = wire_frames(codec.encode_frames(msg))
    return codec.decode(header, bufs)


def tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous()
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()


def assert_same(got, want):
    """Deep equality that also checks array kind (numpy vs torch), dtype, shape and bits."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
        assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
        # Compare bit patterns: NaNs and bfloat16 values must survive exactly.
        assert tensor_bytes(got) == tensor_bytes(want)
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"expected an ndarray, got {type(got).__name__}"
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want)
        for k in want:
            assert_same(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == want and type(got) is type(want)


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
PATHS = ["encode", "encode_frames"]


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


# --------------------------------------------------------------------- round trips


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


@pytest.mark.parametrize("path", PATHS)
def test_nested_maps_and_lists(path):
    value = {
        "ids": [np.arange(5, dtype=np.int64), np.zeros((0, 3), np.int32)],
        "logp": {"mu": torch.full((4,), -0.25), "deep": [[{"k": np.float32(1.5)}], []]},
        "big": [np.ones(100_000, np.float32), {"again": torch.zeros(50_000, dtype=torch.bfloat16)}],
        "scalars": [1, -2, 3.5, True, None, "x", b"\x00\xff", np.int64(7), np.bool_(False)],
        "tuple": (1, 2),
        "empty": {},
    }
    want = dict(value)
    want["logp"] = {"mu": value["logp"]["mu"], "deep": [[{"k": 1.5}], []]}
    want["scalars"] = [1, -2, 3.5, True, None, "x", b"\x00\xff", 7, False]  # numpy scalars -> Python
    want["tuple"] = [1, 2]
    assert_same(roundtrip(AnyMsg(value), path).x, want)


@pytest.mark.parametrize("path", PATHS)
def test_int_keyed_map_roundtrips(path):
    # e.g. a per-policy-version count: encode accepts it, so decode must give it back
    # (or encode must refuse it) -- never a message that can be sent but not received.
    value = {0: 1.0, 3: 2.5}
    try:
        data = roundtrip(AnyMsg(value), path)
    except CodecError as e:
        pytest.fail(f"an int-keyed map encodes but does not decode: {e}")
    assert data.x == value


@pytest.mark.parametrize("path", PATHS)
def test_typed_message_roundtrip(path):
    m = typed(n=-5, f=2, note="hi", b=b"\x01" * 10, ids=np.arange(70_000, dtype=np.int32))
    got = roundtrip(m, path)
    assert type(got) is Typed
    assert (got.n, got.f, got.s, got.tags, got.metrics, got.note, got.b) == (
        -5,
        2,
        "s",
        ["a"],
        {"r": 1.0},
        "hi",
        b"\x01" * 10,
    )
    assert_same(got.ids, m.ids)


def test_defaults_fill_missing_optional_fields():
    got = codec.decode(msgpack.packb({"type": "CodecTestAny", "v": codec.SCHEMA_VERSION}))
    assert got == AnyMsg(None)


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


# ------------------------------------------------------------------ encode errors


def test_encode_refuses_what_cannot_travel():
    with pytest.raises(CodecError, match="object arrays"):
        codec.encode(AnyMsg(np.array([object()])))
    with pytest.raises(CodecError, match="cannot encode a value of type set"):
        codec.encode(AnyMsg({1, 2}))
    with pytest.raises(CodecError, match="not a registered message type"):

        @dataclasses.dataclass
        class NotRegistered:
            x: int = 0

        codec.encode(NotRegistered())
    if torch.cuda.is_available():  # pragma: no cover - CPU CI
        with pytest.raises(CodecError, match="cuda tensor"):
            codec.encode(AnyMsg(torch.zeros(2, device="cuda")))
    else:
        with pytest.raises(CodecError, match="meta tensor"):
            codec.encode(AnyMsg(torch.zeros(2, device="meta")))


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):

        @codec.message(name="CodecTestAny")
        class Clash:
            x: int = 0


# ------------------------------------------------------------------ decode errors


def body(**fields) -> dict:
    out = {
        "type": "CodecTestTyped",
        "v": codec.SCHEMA_VERSION,
        "n": 1,
        "f": 0.5,
        "s": "s",
        "ids": np.arange(3, dtype=np.int32),
        "tags": ["a"],
        "metrics": {"r": 1.0},
    }
    out.update(fields)
    return {k: v for k, v in out.items() if v is not DROP}


DROP = object()


def pack(d: dict) -> bytes:
    return msgpack.packb(d, default=arrays._Encoder(out_of_band=False).default, use_bin_type=True)


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


def test_unknown_message_type():
    with pytest.raises(CodecError, match="unknown message type 'NoSuchThing'"):
        codec.decode(pack(body(type="NoSuchThing")))


def test_missing_type():
    with pytest.raises(CodecError, match="no 'type' field"):
        codec.decode(pack(body(type=DROP)))


@pytest.mark.parametrize("version", [0, codec.SCHEMA_VERSION + 1, str(codec.SCHEMA_VERSION), None, DROP])
def test_wrong_schema_version(version):
    with pytest.raises(CodecError, match="CodecTestTyped: schema version"):
        codec.decode(pack(body(v=version)))


@pytest.mark.parametrize("field", ["n", "f", "s", "ids", "tags", "metrics"])
def test_missing_field(field):
    with pytest.raises(CodecError, match=f"CodecTestTyped: missing field '{field}'"):
        codec.decode(pack(body(**{field: DROP})))


def test_extra_field():
    with pytest.raises(CodecError, match="CodecTestTyped: unexpected field.*bogus"):
        codec.decode(pack(body(bogus=1)))


@pytest.mark.parametrize(
    "field,value,what",
    [
        ("n", "1", "expected int, got str"),
        ("n", True, "expected int, got bool"),
        ("n", 1.5, "expected int, got float"),
        ("f", "x", "expected float, got str"),
        ("s", 3, "expected str, got int"),
        ("ids", [1, 2, 3], "expected an array, got list"),
        ("tags", "a", "expected a list, got str"),
        ("tags", ["a", 2], "item 1: expected str, got int"),
        ("metrics", [1.0], "expected a map, got list"),
        ("metrics", {"r": "high"}, "key 'r': expected float, got str"),
        ("note", 5, "expected"),
        ("b", "text", "expected bytes, got str"),
    ],
)
def test_wrong_field_type(field, value, what):
    with pytest.raises(CodecError, match=f"CodecTestTyped.{field}: .*{what}"):
        codec.decode(pack(body(**{field: value})))


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


def test_non_string_field_name():
    with pytest.raises(CodecError, match="field names must be strings"):
        codec.decode(msgpack.packb({"type": "CodecTestAny", "v": codec.SCHEMA_VERSION, 1: 2}))


# ---------------------------------------------------------------- ragged lists
#
# A list of small 1-d arrays of one dtype (a group's responses, their log-probs) travels as one
# extension: the same arrays come out, at a fraction of the per-array cost.


@codec.message(name="CodecTestRagged")
class RaggedMsg:
    ids: list[np.ndarray]
    other: Any = None


def _ragged_ext_count(data: bytes) -> int:
    seen = []
    msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=lambda code, d: seen.append(code) or None)
    return seen.count(arrays._EXT_RAGGED)


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


# ------------------------------------------------------------- the encoder pool


@codec.message(name="CodecTestIntHinted")
class IntHinted:
    n: int
    s: str = ""


def test_only_fields_whose_hint_admits_a_list_are_looked_at_for_ragged_lists():
    spec = encoding._encode_spec(Typed)
    assert spec[4] == ("tags",)  # list[str]; ids (an array), metrics (a map) and the rest cannot
    assert encoding._encode_spec(RaggedMsg)[4] == ("ids", "other")  # list[np.ndarray] and Any
    assert encoding._encode_spec(IntHinted)[4] == ()


def test_a_list_in_a_field_whose_hint_rules_it_out_still_encodes_and_is_refused_by_name():
    arrays = [np.arange(3), np.arange(4)]
    data = codec.encode(IntHinted(n=arrays))  # type: ignore[arg-type]
    assert _ragged_ext_count(data) == 0  # the plain way: a list of array extensions
    with pytest.raises(CodecError, match=r"CodecTestIntHinted\.n: expected int"):
        codec.decode(data)


@codec.message(name="CodecTestRaggedBesideInt")
class RaggedBesideInt:
    ids: list[np.ndarray]
    n: int = 0


def test_beside_a_ragged_list_a_list_in_a_field_that_rules_lists_out_stays_plain():
    arrays = [np.arange(3), np.arange(4)]
    data = codec.encode(RaggedBesideInt(ids=arrays, n=list(arrays)))  # type: ignore[arg-type]
    assert _ragged_ext_count(data) == 1  # ids only
    with pytest.raises(CodecError, match=r"CodecTestRaggedBesideInt\.n: expected int"):
        codec.decode(data)


def test_an_encoding_started_inside_another_one_gets_an_encoder_of_its_own(monkeypatch):
    """A hook of the outer pack (here the array conversion; in real life a signal handler that
    sends) encodes a message while the outer Packer is mid-message: both come out whole."""
    inner = IntHinted(n=7, s="inner")
    inner_bytes = []
    as_numpy = arrays._as_numpy

    def encoding_as_numpy(obj):
        inner_bytes.append(codec.encode(inner))
        return as_numpy(obj)

    monkeypatch.setattr(arrays, "_as_numpy", encoding_as_numpy)
    outer = typed(ids=np.arange(5, dtype=np.int64), tags=["x", "y"])
    for path in PATHS * 3:  # again and again: the encoders in the pool by then are taken too
        got = roundtrip(outer, path)
        assert_same(got.ids, outer.ids) and got.tags == ["x", "y"]
    assert len(inner_bytes) == 6 and all(codec.decode(b) == inner for b in inner_bytes)


def test_threads_encoding_at_once_each_get_their_own_messages():
    import threading

    def work(k: int, out: list) -> None:
        for i in range(2000):
            msg = typed(n=k * 10_000 + i, ids=np.full(3, k, dtype=np.int32), tags=[str(k)] * (i % 3))
            got = codec.decode(codec.encode_frames(msg)[0])
            out.append(got.n == msg.n and got.tags == msg.tags and got.ids.tobytes() == msg.ids.tobytes())

    results = [[] for _ in range(4)]
    threads = [threading.Thread(target=work, args=(k, results[k])) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(r) == 2000 and all(r) for r in results)
