"""Encoding messages (transports/codec/encoding.py): maps, typed fields, what cannot travel,
which fields may hold a ragged list, and the encoder pool (reentrant, thread-safe)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from support.codec_messages import (
    PATHS,
    AnyMsg,
    RaggedMsg,
    Typed,
    _ragged_ext_count,
    assert_same,
    roundtrip,
    typed,
)
from transports import codec
from transports.codec import CodecError, arrays, encoding


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


# ------------------------------------------------------------- the encoder pool


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
