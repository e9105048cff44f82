"""msgpack codec for typed messages, with numpy arrays and CPU tensors as raw bytes.

A message is a dataclass registered with :func:`message`. On the wire it is a msgpack map
``{"type": NAME, "v": SCHEMA_VERSION, **fields}``. Arrays never become Python lists: an array
travels as a msgpack extension holding its dtype, shape and raw bytes (in-band), or, when
encoded with :func:`encode_frames`, as a small reference to a separate raw buffer that the
transport sends untouched (out-of-band, no copy of large payloads).

Decoding validates everything it is given: truncated or malformed bytes, an unknown message
type, a schema version it does not speak, a missing, extra or wrongly-typed field all raise
:class:`CodecError` with a message that names the problem.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

import msgpack
import numpy as np

try:  # torch is optional for this layer: the codec also serves plain numpy programs
    import torch
except ImportError:  # pragma: no cover - torch is a hard dependency of mpirl itself
    torch = None

SCHEMA_VERSION = 1

# Extension codes. In-band arrays carry their bytes; out-of-band ones carry an index into
# the frame list that travels beside the header.
_EXT_ARRAY = 1
_EXT_ARRAY_OOB = 2

# Arrays at least this large go out-of-band in encode_frames; smaller ones are cheaper
# to copy into the header than to send as a separate MPI message.
OOB_THRESHOLD_BYTES = 64 * 1024

# numpy has no bfloat16: such tensors travel as their 16-bit pattern under this name.
_BF16 = "bfloat16"


class CodecError(ValueError):
    """Bytes that do not decode into a valid message; the text says what is wrong."""


_REGISTRY: dict[str, type] = {}


def message(cls=None, *, name: str | None = None):
    """Class decorator: make ``cls`` a dataclass and register it as a wire message type."""

    def wrap(c):
        if not dataclasses.is_dataclass(c):
            c = dataclasses.dataclass(c)
        type_name = name or c.__name__
        if type_name in _REGISTRY and _REGISTRY[type_name] is not c:
            raise ValueError(f"message type {type_name!r} is registered twice")
        _REGISTRY[type_name] = c
        c.__message_type__ = type_name
        return c

    return wrap if cls is None else wrap(cls)


def registered_types() -> dict[str, type]:
    return dict(_REGISTRY)


# ----------------------------------------------------------------------------- encoding


def _array_header(arr: np.ndarray, is_torch: bool, dtype_name: str) -> list:
    return [dtype_name, list(arr.shape), is_torch]


def _as_numpy(obj) -> tuple[np.ndarray, bool, str] | None:
    """(contiguous array, came-from-torch, dtype name) for arrays and CPU tensors, else None."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise CodecError("object arrays cannot be encoded; use a numeric dtype")
        # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
        arr = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)
        return arr, False, obj.dtype.str
    if torch is not None and isinstance(obj, torch.Tensor):
        if obj.device.type != "cpu":
            raise CodecError(
                f"a {obj.device.type} tensor cannot travel in a message; "
                "move it to the CPU or send it with a weight transport"
            )
        t = obj.detach().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy(), True, _BF16
        arr = t.numpy()
        return arr, True, arr.dtype.str
    return None


class _Encoder:
    def __init__(self, out_of_band: bool):
        self.out_of_band = out_of_band
        self.frames: list[memoryview] = []

    def default(self, obj):
        got = _as_numpy(obj)
        if got is not None:
            arr, is_torch, dtype_name = got
            header = _array_header(arr, is_torch, dtype_name)
            if self.out_of_band and arr.nbytes >= OOB_THRESHOLD_BYTES:
                self.frames.append(memoryview(arr.reshape(-1).view(np.uint8)))
                header.append(len(self.frames) - 1)
                return msgpack.ExtType(_EXT_ARRAY_OOB, msgpack.packb(header))
            packed_header = msgpack.packb(header)
            # 4-byte header length, header, raw bytes: one copy, no per-element work.
            return msgpack.ExtType(
                _EXT_ARRAY,
                len(packed_header).to_bytes(4, "little") + packed_header + arr.tobytes(),
            )
        if isinstance(obj, (np.integer, np.floating, np.bool_)):
            return obj.item()
        if isinstance(obj, tuple):
            return list(obj)
        raise CodecError(f"cannot encode a value of type {type(obj).__name__}")


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # per message class, worked out on first use


def _to_map(msg) -> dict:
    cls = type(msg)
    type_name = getattr(cls, "__message_type__", None)
    if type_name is None:
        raise CodecError(f"{cls.__name__} is not a registered message type")
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    body = {"type": type_name, "v": SCHEMA_VERSION}
    for name in names:
        body[name] = getattr(msg, name)
    return body


def encode(msg) -> bytes:
    """Encode a registered message into one self-contained byte string."""
    enc = _Encoder(out_of_band=False)
    return msgpack.packb(_to_map(msg), default=enc.default, use_bin_type=True)


def encode_frames(msg) -> list:
    """Encode into ``[header, *buffers]``: large arrays are left as raw buffers (no copy)."""
    enc = _Encoder(out_of_band=True)
    header = msgpack.packb(_to_map(msg), default=enc.default, use_bin_type=True)
    return [header, *enc.frames]


# ----------------------------------------------------------------------------- decoding


def _array_from(header, raw, writable_copy: bool):
    if not (isinstance(header, list) and len(header) >= 3):
        raise CodecError("array extension has a malformed header")
    dtype_name, shape, is_torch = header[0], header[1], header[2]
    try:
        dtype = np.dtype(np.int16 if dtype_name == _BF16 else dtype_name)
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError) as e:
        raise CodecError(f"array extension has a bad dtype or shape: {e}") from None
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        raise CodecError(
            f"array payload is {len(raw)} bytes but dtype {dtype_name} and shape "
            f"{list(shape)} need {expected} (truncated message?)"
        )
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    if writable_copy:
        arr = arr.copy()
    if is_torch:
        if torch is None:
            raise CodecError("message holds a torch tensor but torch is not installed")
        t = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
        return t.view(torch.bfloat16) if dtype_name == _BF16 else t
    return arr


def _ext_hook_for(frames):
    def ext_hook(code, data):
        if code == _EXT_ARRAY:
            if len(data) < 4:
                raise CodecError("array extension is truncated")
            n = int.from_bytes(data[:4], "little")
            header = msgpack.unpackb(data[4 : 4 + n], raw=False)
            # In-band bytes belong to the message buffer: copy so the array is writable.
            return _array_from(header, memoryview(data)[4 + n :], writable_copy=True)
        if code == _EXT_ARRAY_OOB:
            header = msgpack.unpackb(data, raw=False)
            if not (isinstance(header, list) and len(header) == 4):
                raise CodecError("out-of-band array reference is malformed")
            index = header[3]
            if not (isinstance(index, int) and 0 <= index < len(frames)):
                raise CodecError(
                    f"out-of-band array refers to buffer {index} but {len(frames)} came with it"
                )
            # Out-of-band frames were received into fresh buffers: no copy needed.
            return _array_from(header[:3], frames[index], writable_copy=False)
        raise CodecError(f"unknown msgpack extension code {code}")

    return ext_hook


def decode(data, frames=()) -> Any:
    """Decode bytes (plus out-of-band buffers, if any) into a registered message instance."""
    try:
        # strict_map_key=False: maps keyed by int (say, per policy version) encode, so they
        # must decode too; field names are checked to be strings in _from_map.
        body = msgpack.unpackb(data, raw=False, ext_hook=_ext_hook_for(list(frames)), strict_map_key=False)
    except CodecError:
        raise
    except msgpack.ExtraData:
        raise CodecError("message has trailing bytes after its end") from None
    except (ValueError, msgpack.UnpackException, TypeError) as e:
        raise CodecError(f"malformed or truncated message bytes: {e}") from None
    if not isinstance(body, dict):
        raise CodecError(f"a message must be a map, got {type(body).__name__}")
    return _from_map(body)


def _from_map(body: dict):
    type_name = body.pop("type", None)
    if type_name is None:
        raise CodecError("message has no 'type' field")
    cls = _REGISTRY.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        raise CodecError(f"unknown message type {type_name!r} (known: {', '.join(sorted(_REGISTRY))})")
    version = body.pop("v", None)
    if version != SCHEMA_VERSION:
        raise CodecError(f"{type_name}: schema version {version!r}, this build speaks {SCHEMA_VERSION}")
    names, required, checks = _schema(cls)
    extra = body.keys() - names
    if extra:
        if not all(isinstance(k, str) for k in extra):
            raise CodecError(f"{type_name}: field names must be strings, got {sorted(map(repr, extra))}")
        raise CodecError(f"{type_name}: unexpected field(s) {', '.join(sorted(extra))}")
    if not required <= body.keys():
        missing = [n for n in names if n in required and n not in body]
        raise CodecError(f"{type_name}: missing field {missing[0]!r}")
    for name, fits, hint in checks:
        if name in body and not fits(body[name]):
            raise CodecError(f"{type_name}.{name}: {_type_problem(body[name], hint)}")
    return cls(**body)


# Decoding is on every message's path: the per-class facts are worked out once.
_SCHEMA_CACHE: dict[type, tuple] = {}


def _schema(cls) -> tuple:
    """(field names in order, required names, [(name, fits(value) -> bool, hint)])."""
    got = _SCHEMA_CACHE.get(cls)
    if got is None:
        hints = _hints(cls)
        fields = dataclasses.fields(cls)
        names = tuple(f.name for f in fields)
        required = frozenset(
            f.name for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        checks = [(f.name, _fits_for(hints[f.name]), hints[f.name]) for f in fields]
        got = _SCHEMA_CACHE[cls] = (names, required, [c for c in checks if c[1] is not None])
    return got


def _fits_for(hint):
    """A fast yes/no test equivalent to ``_type_problem(value, hint) is None`` (None: always fits)."""
    if hint is Any or hint is object:
        return None
    if hint is int:
        return lambda v: type(v) is int or (isinstance(v, int) and not isinstance(v, bool))
    if hint is float:
        return lambda v: type(v) is float or (isinstance(v, (int, float)) and not isinstance(v, bool))
    if hint in (str, bytes, bool, np.ndarray):
        return lambda v: isinstance(v, hint)
    return lambda v: _type_problem(v, hint) is None


_HINT_CACHE: dict[type, dict] = {}


def _hints(cls) -> dict:
    if cls not in _HINT_CACHE:
        _HINT_CACHE[cls] = typing.get_type_hints(cls)
    return _HINT_CACHE[cls]


def _type_problem(value, hint) -> str | None:
    """None if ``value`` fits ``hint``, else a short description of the mismatch."""
    if hint is Any or hint is object:
        return None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if any(_type_problem(value, h) is None for h in options):
            return None
        return f"expected {_hint_name(hint)}, got {type(value).__name__}"
    if hint is type(None):
        return None if value is None else f"expected None, got {type(value).__name__}"
    if origin is list or hint is list:
        if not isinstance(value, list):
            return f"expected a list, got {type(value).__name__}"
        (item,) = typing.get_args(hint) or (Any,)
        for i, v in enumerate(value):
            p = _type_problem(v, item)
            if p:
                return f"item {i}: {p}"
        return None
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return f"expected a map, got {type(value).__name__}"
        args = typing.get_args(hint)
        if args:
            for k, v in value.items():
                p = _type_problem(k, args[0]) or _type_problem(v, args[1])
                if p:
                    return f"key {k!r}: {p}"
        return None
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"expected float, got {type(value).__name__}"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"expected int, got {type(value).__name__}"
    if hint is np.ndarray:
        return None if isinstance(value, np.ndarray) else f"expected an array, got {type(value).__name__}"
    if isinstance(hint, type):
        return None if isinstance(value, hint) else f"expected {hint.__name__}, got {type(value).__name__}"
    return None  # a hint we do not check (e.g. a TypeVar): accept


def _hint_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
