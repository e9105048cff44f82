"""The compiled plain-message codec (transports/fast_codec.pyx) against the codec itself.

The compiled path packs and builds plain messages on its own (codec.plain_message_spec) and
hands every other message to transports/codec/. Differential tests, fuzzed (Hypothesis):
for any message it encodes the same bytes as the codec, and for any bytes it decodes the
same message or raises the same CodecError. Skipped where the compiled module is not built
(``make venv`` builds it).
"""

from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roles.protocol as protocol
from transports import codec
from transports.choose import compiled_transport
from transports.codec import CodecError

if isinstance(compiled_transport(), str):
    pytest.skip(f"the compiled transport is {compiled_transport()}", allow_module_level=True)

from transports import fast_codec as fast  # noqa: E402


@codec.message(name="FastCodecScalars")
class Scalars:
    count: int
    ratio: float
    name: str
    blob: bytes
    flag: bool
    maybe: int | None = None


@codec.message(name="FastCodecNotPlain")
class NotPlain:
    ids: list[int]
    extra: dict


@codec.message(name="FastCodecPostInit")
class PostInit:
    n: int

    def __post_init__(self):
        if self.n < 0:
            raise ValueError("n must be >= 0")


@codec.message(name="FastCodecEmpty")
class Empty:
    pass


def same_message(a, b) -> bool:
    """Equal as messages: the same class, fields of the same types (an int is not a float),
    the same bytes when encoded again (so NaN equals NaN, and arrays compare whole)."""
    if type(a) is not type(b):
        return False
    if any(type(getattr(a, f.name)) is not type(getattr(b, f.name)) for f in dataclasses.fields(a)):
        return False
    return codec.encode(a) == codec.encode(b)


def outcome(decode, data: bytes):
    try:
        return ("ok", decode(data))
    except CodecError as e:
        return ("refused", str(e))


def assert_same_decoding(data: bytes) -> None:
    ours, theirs = outcome(fast.decode, data), outcome(codec.decode, data)
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "ok":
        assert same_message(ours[1], theirs[1]), (ours[1], theirs[1])
    else:
        assert ours[1] == theirs[1]


def test_plain_messages_are_the_scalar_only_plain_dataclasses():
    assert codec.plain_message_spec(Scalars) is not None
    assert codec.plain_message_spec(Empty) is not None
    assert codec.plain_message_spec(NotPlain) is None  # lists and dicts: the codec's path
    assert codec.plain_message_spec(PostInit) is None  # __post_init__: built by calling the class
    assert codec.plain_message_spec(protocol.WeightsPushed) is not None
    assert codec.plain_message_spec(protocol.Rollout) is None  # arrays


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=12),
    st.binary(max_size=12), st.integers(-(2**70), -(2**64)) | st.integers(2**64, 2**70),
    st.builds(np.int64, st.integers(-100, 100)), st.builds(np.float32, st.floats(width=32)),
)  # fmt: skip


@settings(max_examples=1500, deadline=None)
@given(values=st.fixed_dictionaries({f.name: SCALARS for f in dataclasses.fields(Scalars)}))
def test_any_values_encode_to_the_codecs_bytes_or_its_error(values):
    msg = Scalars(**values)
    try:
        theirs = codec.encode_frames(msg)
    except Exception as e:  # noqa: BLE001 - whatever the codec raises, ours must raise too
        with pytest.raises(type(e)):
            fast.encode_frames(msg)
        return
    ours = fast.encode_frames(msg)
    assert len(ours) == len(theirs) == 1
    assert bytes(ours[0]) == bytes(theirs[0])
    assert_same_decoding(bytes(ours[0]))


def test_protocol_messages_encode_alike_and_round_trip():
    samples = [
        protocol.WeightsPushed(version=3),
        protocol.Stop(reason="done"),
        protocol.Preempt(signal="SIGTERM"),
        protocol.SaveState(steps_done=4, path="/tmp/x"),
        protocol.StateSaved(steps_done=4),
        protocol.FinalVersion(version=9),
        protocol.Rollout(
            example_id=1, group_id=4, step=1, prompt_ids=np.arange(5, dtype=np.int32),
            response_ids=[np.arange(4, dtype=np.int32)], logprobs=[np.full(4, -0.5, np.float32)],
            finish_reasons=["stop"], policy_version=2, rewards=[1.0],
        ),
    ]  # fmt: skip
    for msg in samples:
        ours, theirs = fast.encode_frames(msg), codec.encode_frames(msg)
        assert [bytes(f) for f in ours] == [bytes(f) for f in theirs]
        back = fast.decode(ours[0], ours[1:])
        assert same_message(back, codec.decode(theirs[0], theirs[1:])), msg


def test_an_instance_whose_dict_is_not_just_its_fields_goes_the_codecs_way():
    msg = Scalars(1, 0.5, "a", b"b", True)
    msg.stray = 1  # the codec packs the fields by name; the receiver must see no stray
    assert fast.encode_frames(msg)[0] == codec.encode_frames(msg)[0]
    del msg.stray, msg.maybe  # a field gone from the dict: its class default is packed
    assert fast.encode_frames(msg)[0] == codec.encode_frames(msg)[0]
    del msg.count  # and one without a default: the codec's error
    with pytest.raises(AttributeError, match="count"):
        codec.encode_frames(msg)
    with pytest.raises(AttributeError, match="count"):
        fast.encode_frames(msg)


PLAIN_NAMES = sorted(n for n, c in codec.registered_types().items() if codec.plain_message_spec(c))


# What msgpack can carry: the scalars above but those a map cannot hold (past 64 bits, numpy's).
WIRE_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=12),
    st.binary(max_size=12),
)  # fmt: skip


@st.composite
def plain_maps(draw) -> bytes:
    """A msgpack map claiming a plain type: right, missing, extra or wrongly-typed fields."""
    name = draw(st.sampled_from(PLAIN_NAMES + ["NoSuchType"]))
    cls = codec.registered_types().get(name)
    names = [f.name for f in dataclasses.fields(cls)] if cls else ["x"]
    fields = {n: draw(WIRE_SCALARS) for n in names}
    if draw(st.booleans()) and fields:
        del fields[draw(st.sampled_from(sorted(fields)))]
    body = {"type": name, "v": draw(st.sampled_from([codec.SCHEMA_VERSION, codec.SCHEMA_VERSION * 1.0, 0, None]))}
    if draw(st.booleans()):
        body = {**fields, **body}  # "type" and "v" last: not the order the codec writes
    else:
        body.update(fields)
    if draw(st.booleans()):
        body[draw(st.text(max_size=6))] = draw(WIRE_SCALARS)
    return msgpack.packb(body, use_bin_type=True)


@settings(max_examples=3000, deadline=None)
@given(data=plain_maps())
def test_maps_claiming_a_plain_type_decode_alike(data):
    assert_same_decoding(data)


@settings(max_examples=1500, deadline=None)
@given(data=st.binary(max_size=96))
def test_random_bytes_decode_alike(data):
    assert_same_decoding(data)


@settings(max_examples=1500, deadline=None)
@given(
    frame=st.sampled_from([codec.encode(Scalars(7, 0.25, "x", b"y", False)), codec.encode(protocol.WeightsPushed(3))]),
    edits=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 255)), min_size=1, max_size=3),
)
def test_damaged_plain_messages_decode_alike(frame, edits):
    data = bytearray(frame)
    for at, value in edits:
        data[at % len(data)] = value
    assert_same_decoding(bytes(data))


def test_decode_many_keeps_each_outcome_in_place():
    good = codec.encode(protocol.WeightsPushed(version=5))
    out = fast.decode_many([good, b"\xc1", codec.encode(Scalars(1, 2.0, "s", b"b", True))])
    assert out[0] == protocol.WeightsPushed(version=5)
    assert isinstance(out[1], CodecError) and str(out[1]) == str(codec.decode_many([b"\xc1"])[0])
    assert same_message(out[2], Scalars(1, 2.0, "s", b"b", True))
    # A class whose __init__ refuses: the exception is the class's own, as the codec's.
    bad = msgpack.packb({"type": "FastCodecPostInit", "v": codec.SCHEMA_VERSION, "n": -1})
    (theirs,), (ours,) = codec.decode_many([bad]), fast.decode_many([bad])
    assert type(ours) is type(theirs) and str(ours) == str(theirs)


def test_a_float_field_keeps_an_int_as_the_codec_does():
    msg = fast.decode(fast.encode_frames(Scalars(1, 2, "s", b"b", True))[0])
    assert type(msg.ratio) is int and msg.ratio == 2


@codec.message(name="FastCodecPair")
class Pair:
    seq: int
    data: bytes


@pytest.mark.parametrize(
    ("entries", "valid"),
    [
        ([("seq", 1), ("seq", 2)], False),  # a field twice, the other missing: the count still fits
        ([("seq", 1), ("type", "FastCodecPair")], False),  # "type" again in place of a field
        ([("data", b"x"), ("seq", 1), ("seq", 2)], True),  # a field twice, none missing: the last wins
        ([("seq", True), ("data", b"x")], False),  # a bool for an int
        ([("seq", 1), ("data", "x")], False),  # a str for bytes
        ([("seq", 1), ("data", b"x")], True),  # right, in the codec's order
        ([("data", b"x"), ("seq", 2**64 - 1)], True),  # right, in another order, the largest int
    ],
)
def test_hand_packed_maps_with_repeated_or_wrong_fields_decode_alike(entries, valid):
    """Maps msgpack.packb cannot make from a dict: keys repeated after the codec's prefix."""
    spec = codec.plain_message_spec(Pair)
    body = b"".join(msgpack.packb(k) + msgpack.packb(v, use_bin_type=True) for k, v in entries)
    data = bytes([0x80 | (2 + len(entries))]) + spec[1][1:] + body  # the prefix with this entry count
    assert_same_decoding(data)
    if valid:
        assert fast.decode(data) == Pair(**dict(entries))
    else:
        with pytest.raises(CodecError):
            fast.decode(data)
