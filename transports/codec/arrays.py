"""Arrays and CPU tensors as msgpack extensions: in-band (dtype, shape and raw bytes), out-of-band
(a reference to a raw buffer that travels beside the header) and ragged lists of small 1-d arrays.
Both sides: the Packer's ``default`` hook (:class:`_Encoder`) and the decoder's ``ext_hook``."""

from __future__ import annotations

import importlib
import math
import sys
import threading

import msgpack
import numpy as np

from transports.codec.registry import CodecError


# torch is never imported here: ranks that hold no tensors (controller, reward) do without it,
# which saves them a second of CPU at start-up. Only a process that imported
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

    memoryview's own cast first: numpy's reshape and view cost more, on the path of every large
    message. numpy exports no buffer for datetime arrays; those take numpy's way."""
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
# serves every message: a Decoder and a hook closure built per message with buffers cost more
# than the decoding, most right after a large receive has swept the caches.
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
