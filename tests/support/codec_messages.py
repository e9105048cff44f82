"""Messages and helpers the codec's tests share (tests/unit/transports/codec/): registered test
message types, round trips over both wire paths, and a deep comparison of decoded values."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import torch

from transports import codec
from transports.codec import arrays


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


PATHS = ["encode", "encode_frames"]


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


@codec.message(name="CodecTestRagged")
class RaggedMsg:
    ids: list[np.ndarray]
    other: Any = None


def _ragged_ext_count(data: bytes) -> int:
    seen = []
    msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=lambda code, d: seen.append(code) or None)
    return seen.count(arrays._EXT_RAGGED)
