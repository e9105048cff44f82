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
import importlib
import math
import sys
import threading
import types
import typing
from typing import Any, Union

import msgpack
import msgspec
import numpy as np


# torch is never imported here: ranks that hold no tensors (controller, reward) do without it,
# which saves them a second of CPU at start-up (docs/log.md). Only a process that imported
# torch can hold a tensor to encode; decoding one imports it.
def _torch_if_imported():
    return sys.modules.get("torch")


def _torch_for_decoding():
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise CodecError("message holds a torch tensor but torch is not installed") from None


SCHEMA_VERSION = 3  # 2: lists of small 1-d arrays travel as one ragged extension; 3: example ids, eval tags

# Extension codes. In-band arrays carry their bytes; out-of-band ones carry an index into
# the frame list that travels beside the header; a ragged list is several 1-d arrays of one
# dtype as one run of bytes plus their lengths.
_EXT_ARRAY = 1
_EXT_ARRAY_OOB = 2
_EXT_RAGGED = 3

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
    torch = _torch_if_imported()
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


def _byte_view(arr: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, as a flat memoryview (no copy).

    memoryview's own cast first: numpy's reshape and view cost ~25 us more than it right after
    a large receive had swept the caches, on the path of every large message. numpy exports no
    buffer for datetime arrays; those take numpy's way."""
    try:
        return memoryview(arr).cast("B")
    except (TypeError, ValueError):
        return memoryview(arr.reshape(-1).view(np.uint8))


class _Encoder:
    """A msgpack Packer, its ``default`` hook, and the out-of-band buffers the hook set aside."""

    def __init__(self, out_of_band: bool):
        self.out_of_band = out_of_band
        self.frames: list[memoryview] = []
        # Reused from message to message: making a Packer costs about as much as packing a
        # small message with it. A Packer starts afresh after an exception (autoreset).
        self.packer = msgpack.Packer(default=self.default, use_bin_type=True)

    def default(self, obj):
        if type(obj) is _Ragged:
            arrays = obj.arrays
            header = msgpack.packb([arrays[0].dtype.str, [len(a) for a in arrays]])
            return msgpack.ExtType(
                _EXT_RAGGED, len(header).to_bytes(4, "little") + header + b"".join(a.tobytes() for a in arrays)
            )
        got = _as_numpy(obj)
        if got is not None:
            arr, is_torch, dtype_name = got
            header = _array_header(arr, is_torch, dtype_name)
            if self.out_of_band and arr.nbytes >= OOB_THRESHOLD_BYTES:
                self.frames.append(_byte_view(arr))
                header.append(len(self.frames) - 1)
                return msgpack.ExtType(_EXT_ARRAY_OOB, msgpack.packb(header))
            key = (dtype_name, arr.shape, is_torch)
            prefix = _INBAND_PREFIXES.get(key)
            if prefix is None:
                packed_header = msgpack.packb(header)
                prefix = len(packed_header).to_bytes(4, "little") + packed_header
                _remember(_INBAND_PREFIXES, key, prefix)
            # 4-byte header length, header, raw bytes: one copy, no per-element work.
            return msgpack.ExtType(_EXT_ARRAY, prefix + arr.tobytes())
        if isinstance(obj, (np.integer, np.floating, np.bool_)):
            return obj.item()
        if isinstance(obj, tuple):
            return list(obj)
        raise CodecError(f"cannot encode a value of type {type(obj).__name__}")


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


class _Ragged:
    """Marks a list of small 1-d arrays of one dtype, to be packed as one extension."""

    __slots__ = ("arrays",)

    def __init__(self, arrays):
        self.arrays = arrays


def _is_ragged(items: list) -> bool:
    """A list worth packing as one ragged extension: 2+ contiguous numeric 1-d numpy arrays of
    one dtype, small enough to travel in-band (a per-array header costs more than the bytes)."""
    if len(items) < 2:
        return False
    dtype, nbytes = items[0].dtype, 0
    if dtype.hasobject:
        return False
    for a in items:
        if type(a) is not np.ndarray or a.dtype != dtype or a.ndim != 1 or not a.flags.c_contiguous:
            return False
        nbytes += a.nbytes
    return nbytes < OOB_THRESHOLD_BYTES


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


def _may_hold_list(hint) -> bool:
    """False only for hints that rule a list out (int, str, np.ndarray, dict[...], ...)."""
    if hint is Any or hint is object:
        return True
    if typing.get_origin(hint) in (Union, types.UnionType):
        return any(_may_hold_list(h) for h in typing.get_args(hint))
    if typing.get_origin(hint) is not None:  # list[X], dict[K, V], Sequence[X], ...
        hint = typing.get_origin(hint)
    return not isinstance(hint, type) or issubclass(list, hint)


def encode(msg) -> bytes:
    """Encode a registered message into one self-contained byte string."""
    return _pack(msg, False)[0]


def encode_frames(msg) -> list:
    """Encode into ``[header, *buffers]``: large arrays are left as raw buffers (no copy)."""
    return _pack(msg, True)


# ----------------------------------------------------------------------------- decoding


_DTYPES: dict[str, np.dtype] = {}  # dtype name -> dtype, for the names seen so far


def _plain_dtype(name) -> np.dtype:
    """The dtype a header names, as a ValueError if it names none or one no array here uses.

    ``np.dtype`` parses strings with a grammar of its own and fails on garbage with whatever
    its parser raises (a SyntaxError for ``","``, found by fuzzing); object dtypes would turn
    received bytes into pointers.
    """
    try:
        dtype = np.dtype(name)
    except Exception as e:  # noqa: BLE001 - any failure to parse a dtype is a bad message
        raise ValueError(f"{name!r} is not a dtype ({type(e).__name__})") from None
    if dtype.hasobject:
        raise ValueError("object dtype")
    if dtype.itemsize == 0:  # np.frombuffer refuses it, with a ValueError of its own
        raise ValueError(f"{name!r} has elements of 0 bytes")
    return dtype


def _array_from(header, raw, writable_copy: bool):
    if not (isinstance(header, list) and len(header) >= 3):
        raise CodecError("array extension has a malformed header")
    dtype_name, shape, is_torch = header[0], header[1], header[2]
    dtype = _DTYPES.get(dtype_name) if type(dtype_name) is str else None
    if dtype is None or type(shape) not in (list, tuple) or not all(type(s) is int for s in shape):
        try:
            dtype = _plain_dtype(np.int16 if dtype_name == _BF16 else dtype_name)
            shape = [int(s) for s in shape]
        except (TypeError, ValueError) as e:
            raise CodecError(f"array extension has a bad dtype or shape: {e}") from None
        if type(dtype_name) is str and len(_DTYPES) < 256:
            _DTYPES[dtype_name] = dtype
    if shape and min(shape) < 0:  # two negatives multiply to a size that fits; reshape would raise
        raise CodecError(f"array extension has a negative dimension in {list(shape)}")
    expected = math.prod(shape) * dtype.itemsize  # math.prod: np.prod costs µs on a short list
    if len(raw) != expected:
        raise CodecError(
            f"array payload is {len(raw)} bytes but dtype {dtype_name} and shape "
            f"{list(shape)} need {expected} (truncated message?)"
        )
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    if writable_copy:
        arr = arr.copy()
    if is_torch:
        torch = _torch_for_decoding()
        t = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
        return t.view(torch.bfloat16) if dtype_name == _BF16 else t
    return arr


def _inband_array(data):
    if len(data) < 4:
        raise CodecError("array extension is truncated")
    n = int.from_bytes(data[:4], "little")
    packed_header = bytes(data[4 : 4 + n])  # a key of the cache: not a view of the message
    header = _INBAND_HEADERS.get(packed_header)
    if header is None:
        header = msgpack.unpackb(packed_header, raw=False)
        if (
            type(header) is list
            and len(header) == 3
            and type(header[1]) is list
            and all(type(x) is int for x in header[1])
        ):  # well-formed so far: worth keeping
            header = [header[0], tuple(header[1]), header[2]]
            _remember(_INBAND_HEADERS, packed_header, header)
    # In-band bytes belong to the message buffer: copy so the array is writable.
    return _array_from(header, memoryview(data)[4 + n :], writable_copy=True)


# The array headers seen recently, packed and unpacked: messages of one kind carry arrays of
# a few dtypes and shapes, so most headers repeat.
_INBAND_PREFIXES: dict[tuple, bytes] = {}
_INBAND_HEADERS: dict[bytes, list] = {}


def _remember(cache: dict, key, value, max_entries: int = 4096) -> None:
    if len(cache) >= max_entries:
        cache.clear()
    cache[key] = value


def _ragged_list(data) -> list:
    """A list of 1-d arrays from one ragged extension: one copy, then views of it."""
    if len(data) < 4:
        raise CodecError("ragged array list is truncated")
    n = int.from_bytes(data[:4], "little")
    try:
        dtype_name, lengths = msgpack.unpackb(data[4 : 4 + n], raw=False)
        dtype = _DTYPES.get(dtype_name) if type(dtype_name) is str else None
        if dtype is None:
            dtype = _plain_dtype(dtype_name)
    except (TypeError, ValueError, msgpack.UnpackException) as e:
        raise CodecError(f"ragged array list has a malformed header: {e}") from None
    if type(lengths) is not list or not all(type(x) is int and x >= 0 for x in lengths):
        raise CodecError("ragged array list has bad lengths")
    raw = memoryview(data)[4 + n :]
    if len(raw) != sum(lengths) * dtype.itemsize:
        raise CodecError(
            f"ragged array list holds {len(raw)} bytes but its lengths need "
            f"{sum(lengths) * dtype.itemsize} (truncated message?)"
        )
    flat = np.frombuffer(raw, dtype=dtype).copy()  # writable, like an in-band array
    out, start = [], 0
    for length in lengths:
        out.append(flat[start : start + length])
        start += length
    return out


# The out-of-band buffers of the message this thread is decoding (see decode). One decoder
# serves every message: building a Decoder and a hook closure per message with buffers cost
# 3 us warm and ~60 us right after a large receive had swept the caches (bench/mailbox.py).
_decoding = threading.local()


def _ext_hook(code, data):
    if code == _EXT_ARRAY:
        return _inband_array(data)
    if code == _EXT_RAGGED:
        return _ragged_list(data)
    if code == _EXT_ARRAY_OOB:
        frames = getattr(_decoding, "frames", ())
        header = msgpack.unpackb(data, raw=False)
        if not (isinstance(header, list) and len(header) == 4):
            raise CodecError("out-of-band array reference is malformed")
        index = header[3]
        if not (isinstance(index, int) and 0 <= index < len(frames)):
            raise CodecError(f"out-of-band array refers to buffer {index} but {len(frames)} came with it")
        # Out-of-band frames were received into fresh buffers: no copy needed.
        return _array_from(header[:3], frames[index], writable_copy=False)
    raise CodecError(f"unknown msgpack extension code {code}")


# Maps are read by msgspec's decoder, not msgpack's unpackb: the same bytes to the same values
# (maps keyed by int too: they encode, so must decode; field names are checked to be strings in
# _from_map), in a third of the time (0.2 against 0.48 µs for a small message, most of it
# unpackb's keyword parsing). That is on every message's path: the receiver of a stream of small
# messages spends most of its time decoding (bench/mailbox.py's small-message rate). Encoding
# stays with msgpack's Packer, which packs a message's map as fast.
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


def _from_map(body):
    """The careful path: validate ``body`` step by step and name the first problem."""
    if type(body) is not dict:
        raise CodecError(f"a message must be a map, got {type(body).__name__}")
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
    for name, hint in checks:
        problem = _type_problem(body[name], hint) if name in body else None
        if problem:
            raise CodecError(f"{type_name}.{name}: {problem}")
    return cls(**body)


_SCHEMA_CACHE: dict[type, tuple] = {}


def _schema(cls) -> tuple:
    """(field names in order, required names, [(name, hint)])."""
    got = _SCHEMA_CACHE.get(cls)
    if got is None:
        hints = _hints(cls)
        fields = dataclasses.fields(cls)
        names = tuple(f.name for f in fields)
        required = frozenset(
            f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        got = _SCHEMA_CACHE[cls] = (names, required, [(f.name, hints[f.name]) for f in fields])
    return got


# Decoding is on every message's path, so each message type gets a builder: a function,
# written for that type when its first message comes, that takes a decoded map and returns
# the message if the map is well-formed (every field there, no other, each value of a type its
# hint accepts), else None, and then _from_map finds and names the problem. Testing each
# value's exact type suffices because a decoded value is one of a few known types (msgpack's,
# plus arrays and tensors). Generated code, as dataclasses does for __init__: one flat
# expression costs a fraction of a loop over per-field checks.
_BUILDERS: dict[str, Any] = {}

_NONE = type(None)
_DECODED_TYPES = (int, float, str, bytes, bool, _NONE, list, dict, np.ndarray)


def _decoded_types() -> tuple:
    # A field hinted as a tensor (or a base of one) comes from a module that imported torch.
    torch = _torch_if_imported()
    return _DECODED_TYPES + ((torch.Tensor,) if torch is not None else ())


def _never(body) -> None:
    return None


def _builder_for(body):
    """The builder for ``body``'s type (made now if need be), or one that always says None."""
    type_name = body.get("type") if type(body) is dict else None
    if type(type_name) is not str or type_name not in _REGISTRY:
        return _never
    build = _BUILDERS[type_name] = _make_builder(_REGISTRY[type_name])
    return build


def _make_builder(cls):
    hints = _hints(cls)
    env = {"cls": cls, "new": object.__new__, "VERSION": SCHEMA_VERSION}
    names = [f.name for f in dataclasses.fields(cls)]
    tests = []
    for i, name in enumerate(names):
        exact = _exact_types(hints[name])
        fits = None if exact is not None else _fits_for(hints[name])
        if exact is not None:
            env[f"t{i}"] = exact
            tests.append(f"type(v{i}) in t{i}")
        elif fits is not None:
            env[f"f{i}"] = fits
            tests.append(f"f{i}(v{i})")
        # else: any value fits, it only has to be there
    take = "\n        ".join(f"v{i} = body[{name!r}]" for i, name in enumerate(names))
    if _is_plain(cls):
        # Exactly what its __init__ does (self.<field> = <value>, in order), without the call.
        make = "\n        ".join(["msg = new(cls)"] + [f"msg.{name} = v{i}" for i, name in enumerate(names)])
        make += "\n        return msg"
    else:
        make = "return cls(" + ", ".join(f"{name}=v{i}" for i, name in enumerate(names)) + ")"
    source = f"""\
def build(body):
    if len(body) != {2 + len(names)} or body.get("v") != VERSION:
        return None
    try:
        {take or "pass"}
    except KeyError:
        return None
    if {" and ".join(tests) or "True"}:
        {make}
    return None
"""
    exec(compile(source, f"<codec builder for {cls.__name__}>", "exec"), env)
    return env["build"]


def _is_plain(cls) -> bool:
    """True if ``cls(**fields)`` only sets the fields, in order, with plain attribute stores:
    the __init__ is the one dataclasses wrote (its code has no file), the class is not
    frozen, has no __post_init__, no own __setattr__, and every field is an __init__ argument."""
    init = cls.__dict__.get("__init__")
    params = getattr(cls, "__dataclass_params__", None)
    return (
        init is not None
        and getattr(getattr(init, "__code__", None), "co_filename", None) == "<string>"
        and params is not None
        and not params.frozen
        and not hasattr(cls, "__post_init__")
        and cls.__setattr__ is object.__setattr__
        and all(f.init for f in dataclasses.fields(cls))
    )


def _exact_types(hint) -> frozenset | None:
    """The decoded types that fit ``hint``, when a type test alone decides; else None.

    Never wider than :func:`_type_problem`: what passes here passes there too.
    """
    if hint is Any or hint is object:
        return None
    if hint is int:
        return frozenset([int])  # not bool
    if hint is float:
        return frozenset([int, float])
    if hint is _NONE:
        return frozenset([_NONE])
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        parts = [_exact_types(h) for h in typing.get_args(hint)]
        return None if any(p is None for p in parts) else frozenset().union(*parts)
    if hint is list or hint is dict:
        return frozenset([hint])
    if origin is None and isinstance(hint, type):
        return frozenset(t for t in _decoded_types() if issubclass(t, hint))
    return None  # list[X], dict[K, V], TypeVars, ...: checked item by item, or not at all


# The values the compiled mailbox path (transports/fast_transport.pyx) packs and checks itself.
_PLAIN_SCALARS = frozenset([int, float, str, bytes, bool, _NONE])


def plain_message_spec(cls) -> tuple | None:
    """How a message of ``cls`` travels, for code that encodes and decodes it without this module.

    ``(wire name, packed map header with the "type" and "v" entries, size of the field map's
    own header that this one replaces, field names, exact types allowed per field)``, for a
    registered plain dataclass (see :func:`_is_plain`) whose every field's hint admits only
    scalars (int, float, str, bytes, bool, None, or a union of them): its map is then all
    there is to its wire form, and a type test per field all there is to checking one. None
    for every other class: the compiled path hands those to :func:`encode_frames` and
    :func:`decode`, as it does any message whose values are not of those exact types.
    """
    type_name = getattr(cls, "__message_type__", None)
    if type_name is None or _REGISTRY.get(type_name) is not cls or not _is_plain(cls):
        return None
    try:
        hints = _hints(cls)
    except Exception:  # noqa: BLE001 - hints that do not resolve: the general path decides
        return None
    names = tuple(f.name for f in dataclasses.fields(cls))
    allowed = []
    for name in names:
        exact = _exact_types(hints.get(name, Any))
        if exact is None or not exact <= _PLAIN_SCALARS:
            return None
        allowed.append(exact)
    prefix, skip = (_ENCODE_SPECS.get(cls) or _encode_spec(cls))[:2]
    return type_name, prefix, skip, names, tuple(allowed)


def _fits_for(hint):
    """A fast test ``fits(decoded value) -> bool``, never wider than :func:`_type_problem`
    (None: anything fits). Items of lists and maps are tested in C where their hint allows."""
    if hint is Any or hint is object:
        return None
    exact = _exact_types(hint)
    if exact is not None:
        return lambda v: type(v) in exact
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        options = [_fits_for(h) for h in args]
        if any(o is None for o in options):
            return None
        return lambda v: any(o(v) for o in options)
    if origin is list:
        item = args[0] if args else Any
        exact = _exact_types(item)
        if exact is not None:
            return lambda v: type(v) is list and exact.issuperset(map(type, v))
        fits = _fits_for(item)
        if fits is None:
            return lambda v: type(v) is list
        return lambda v: type(v) is list and all(map(fits, v))
    if origin is dict and len(args) == 2:
        kfits, vfits = _fits_for(args[0]), _fits_for(args[1])
        kexact, vexact = _exact_types(args[0]), _exact_types(args[1])
        if kfits is None and vfits is None:
            return lambda v: type(v) is dict
        if kexact is not None and vexact is not None:
            return lambda v: (
                type(v) is dict and kexact.issuperset(map(type, v)) and vexact.issuperset(map(type, v.values()))
            )
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
