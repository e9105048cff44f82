"""The message codec fuzzed (Hypothesis): any bytes decode to a message or raise CodecError.

Frames are random bytes, valid messages of every protocol type with bytes flipped, cut or
inserted, and well-formed msgpack maps that claim a registered type with fields of any kind.
Decoding must never raise another exception type, hang, or allocate far beyond the frame's
size; and a mailbox that received garbage goes on delivering the next good message.
"""

from __future__ import annotations

import collections
import tracemalloc

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roles.protocol as protocol
from runtime.mailbox import Address, Mailbox
from transports import codec
from transports.codec import CodecError, arrays

SAMPLES = [
    protocol.PromptBatch(
        batch_id=3, step=1, min_version=0, example_ids=[1, 2], group_ids=[4, 5],
        prompts=[np.arange(5, dtype=np.int32), np.arange(3, dtype=np.int32)], samples_per_prompt=2, seed=7,
    ),
    protocol.Rollout(
        example_id=1, group_id=4, step=1, prompt_ids=np.arange(5, dtype=np.int32),
        response_ids=[np.arange(4, dtype=np.int32), np.arange(2, dtype=np.int32)],
        logprobs=[np.full(4, -0.5, np.float32), np.full(2, -1.0, np.float32)], finish_reasons=["stop", "length"],
        policy_version=2, rewards=[1.0, 0.0],
    ),
    protocol.Scored(step=1, groups=1, score_s=0.1, failures=0, timeouts=0, samples=2, components={"correct": 1.0},
                    shown=[{"prompt": "1+1=", "response": "2", "reward": 1.0}]),
    protocol.StepDone(step=1, version=2, metrics={"loss": 0.5}),
    protocol.WeightsPushed(version=3),
]  # fmt: skip
FRAMES = [codec.encode(m) for m in SAMPLES]
TYPES = sorted(codec.registered_types())


def decodes_or_refuses(data: bytes) -> None:
    """The codec's contract for one frame, with a bound on what it may allocate."""
    tracemalloc.start()
    try:
        msg = codec.decode(data)
    except CodecError as e:
        assert str(e), "a CodecError says what is wrong"
    else:
        assert type(msg) in codec.registered_types().values()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 64 * len(data) + (4 << 20), f"decoding {len(data)} bytes allocated {peak}"


@settings(max_examples=1500, deadline=None)
@given(data=st.binary(max_size=512))
def test_random_bytes_decode_or_raise_codec_error(data):
    decodes_or_refuses(data)


@st.composite
def mutated_frames(draw) -> bytes:
    frame = bytearray(draw(st.sampled_from(FRAMES)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "set"]))
        at = draw(st.integers(0, max(len(frame) - 1, 0)))
        if kind == "flip" and frame:
            frame[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del frame[at:]
        elif kind == "insert":
            frame[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "set" and frame:
            frame[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xC0, 0xC1, 0xCC, 0xDD, 0xDF, 0xFF]))
    return bytes(frame)


@settings(max_examples=2000, deadline=None)
@given(data=mutated_frames())
def test_mutated_messages_decode_or_raise_codec_error(data):
    decodes_or_refuses(data)


FIELD_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=10),
        st.binary(max_size=10),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=8,
)  # fmt: skip


@st.composite
def claimed_messages(draw) -> bytes:
    """A well-formed msgpack map claiming a registered type, with fields of any kind."""
    name = draw(st.sampled_from(TYPES))
    cls = codec.registered_types()[name]
    fields = {f: draw(FIELD_VALUES) for f in getattr(cls, "__dataclass_fields__", {}) if draw(st.booleans())}
    body = {"type": name, "v": draw(st.sampled_from([codec.SCHEMA_VERSION, 0, "1", None])), **fields}
    if draw(st.booleans()):
        body[draw(st.text(max_size=6))] = draw(FIELD_VALUES)
    return msgpack.packb(body, use_bin_type=True)


@settings(max_examples=1500, deadline=None)
@given(data=claimed_messages())
def test_maps_claiming_a_type_decode_or_raise_codec_error(data):
    decodes_or_refuses(data)


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(st.one_of(mutated_frames(), st.sampled_from(FRAMES)), min_size=1, max_size=6))
def test_a_batch_with_garbage_costs_only_the_garbage(batch):
    out = codec.decode_many(batch)
    assert len(out) == len(batch)
    for data, got in zip(batch, out, strict=True):
        if isinstance(got, Exception):
            assert isinstance(got, CodecError), repr(got)
        elif data in FRAMES:
            assert type(got) is type(SAMPLES[FRAMES.index(data)])


# ------------------------------------------------------------------ the mailbox


class FakeTransport:
    """What MPITransport.poll returns: (source rank, header frames, out-of-band buffers)."""

    def __init__(self, arrivals):
        self.arrivals = collections.deque(arrivals)

    def poll(self):
        return self.arrivals.popleft() if self.arrivals else None


def mailbox_receiving(arrivals) -> Mailbox:
    box = object.__new__(Mailbox)  # no MPI: only the receive path is under test
    box.transport = FakeTransport(arrivals)
    box._ready = collections.deque()
    box._senders = [Address("controller", 0), Address("generator", 0)]
    return box


@pytest.mark.parametrize("garbage", [b"", b"\xc1", b"\x81\xa4type\xa3Bad", FRAMES[0][:-3], b"\xff" * 64])
def test_a_mailbox_that_received_garbage_delivers_the_next_good_message(garbage):
    good = codec.encode(protocol.WeightsPushed(version=5))
    box = mailbox_receiving([(1, [garbage], []), (1, [good], []), (1, [garbage, good, garbage, good], [])])
    delivered, refused = [], 0
    for _ in range(10):
        try:
            env = box.poll()
        except CodecError:
            refused += 1
            continue
        if env is None:
            break
        delivered.append(env)
    assert refused == 3
    assert [e.msg for e in delivered] == [protocol.WeightsPushed(version=5)] * 3
    assert all(e.sender == Address("generator", 0) for e in delivered)


@pytest.mark.parametrize("dtype", [b",,,", b"(((", b"|O8", b"xyz", b"|V0"])
def test_an_array_whose_dtype_is_garbage_is_a_codec_error(dtype):
    # Found by the fuzzing above: np.dtype(",") raises SyntaxError, not ValueError.
    frame = codec.encode(SAMPLES[1])
    assert b"\xa3<i4" in frame
    with pytest.raises(CodecError, match="dtype"):
        codec.decode(frame.replace(b"\xa3<i4", b"\xa3" + dtype, 1))


def test_an_array_with_negative_dimensions_is_a_codec_error():
    # Shape [-1, -5] has the size of five int32s: only the sign gives it away.
    codec.decode(codec.encode(SAMPLES[1]))  # the dtype is known (cached) by now, as in a running job
    for shape in ([-1, -5], [5]):
        header = msgpack.packb(["<i4", shape, False])
        data = len(header).to_bytes(4, "little") + header + np.arange(5, dtype="<i4").tobytes()
        if shape == [5]:
            assert list(arrays._inband_array(data)) == [0, 1, 2, 3, 4]  # the same bytes, well-formed
        else:
            with pytest.raises(CodecError, match="negative dimension"):
                arrays._inband_array(data)
