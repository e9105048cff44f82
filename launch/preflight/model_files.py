"""The model folder's weight files, checked from their headers before any rank loads them.

A safetensors file cut short (an interrupted download, a full disk) or damaged is found here,
not when every rank loads it. Its header says everything needed: 8 bytes (little-endian) giving the
header's length N, then N bytes of JSON mapping each tensor's name to its dtype, shape and
``data_offsets`` (its bytes' begin and end in the data that follows the header), plus an
optional ``"__metadata__"`` map of strings. So the file must be exactly 8 + N + the largest
end long, and each tensor's span must hold exactly its elements' bytes, laid end to end from 0
(what the safetensors library itself requires before it will load a file).

Only headers are read, never tensor data, and neither torch nor the safetensors library is
imported: this runs on the controller's rank (which must not import torch) and on every rank
that sizes the model (``launch/preflight/sizing.py``).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from roles.models.transformers_tables import table_from_source

# Bits per element of each dtype a safetensors header may name (the library's own list, as of
# 0.8: F4 and F6 pack several elements into a byte, so sizes are counted in bits).
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
# The safetensors library refuses a longer header (a length this large is a damaged file).
MAX_HEADER_BYTES = 100_000_000
INDEX_NAME = "model.safetensors.index.json"  # transformers' index of a sharded checkpoint
# The older weight format transformers' from_pretrained also loads (the torch engine and the
# trainers do; vLLM's weight loading here reads safetensors only).
TORCH_WEIGHT_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class WeightFileError(ValueError):
    """A weight file (or the index of them) that cannot load; the message names it and the fault."""


@dataclass(frozen=True)
class TensorEntry:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # byte offsets in the data after the header
    end: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _entry(path: Path, name: str, raw) -> TensorEntry:
    where = f"{path}: tensor {name!r}"
    if not isinstance(raw, dict):
        raise WeightFileError(f"{where}: its header entry is a {type(raw).__name__}, not a map")
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in raw]
    if missing:
        raise WeightFileError(f"{where}: its header entry lacks {', '.join(missing)}")
    dtype, shape, offsets = raw["dtype"], raw["shape"], raw["data_offsets"]
    if dtype not in DTYPE_BITS:
        raise WeightFileError(f"{where}: unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})")
    if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
        raise WeightFileError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        raise WeightFileError(f"{where}: data_offsets {offsets!r} is not [begin, end] in bytes")
    if offsets[1] < offsets[0]:
        raise WeightFileError(f"{where}: data_offsets {offsets!r} end before they begin")
    return TensorEntry(dtype, tuple(shape), offsets[0], offsets[1])


def read_header(path: str | Path) -> dict[str, TensorEntry]:
    """The tensors of safetensors file ``path`` by name, from its header alone, once the file is
    shown whole and self-consistent; else a :class:`WeightFileError` naming the file and what
    is wrong with it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise WeightFileError(
                    f"{path}: truncated: {size:,} bytes, too short for a safetensors file (its header length takes 8)"
                )
            n = int.from_bytes(prefix, "little")
            if n > MAX_HEADER_BYTES:
                raise WeightFileError(
                    f"{path}: not a safetensors file: its first 8 bytes give a header of {n:,} bytes, "
                    f"past the format's limit of {MAX_HEADER_BYTES:,}"
                )
            if 8 + n > size:
                raise WeightFileError(
                    f"{path}: truncated: its header alone says {8 + n:,} bytes, the file has {size:,}"
                )
            text = f.read(n)
    except OSError as e:
        raise WeightFileError(f"{path}: cannot read it: {e.strerror or e}") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise WeightFileError(f"{path}: damaged: its header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise WeightFileError(f"{path}: damaged: its header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise WeightFileError(f"{path}: damaged: its __metadata__ is not a map of strings")
    tensors = {name: _entry(path, name, raw) for name, raw in header.items()}
    expected = 8 + n + max((t.end for t in tensors.values()), default=0)
    if size < expected:
        raise WeightFileError(f"{path}: truncated: its header says {expected:,} bytes, the file has {size:,}")
    if size > expected:
        raise WeightFileError(
            f"{path}: damaged: its header says {expected:,} bytes, the file has {size:,} "
            f"({size - expected:,} bytes that no tensor holds)"
        )
    at, previous = 0, None
    for name, t in sorted(tensors.items(), key=lambda item: (item[1].begin, item[1].end)):
        bits = t.elements * DTYPE_BITS[t.dtype]
        if bits % 8 or bits // 8 != t.end - t.begin:
            needs = f"{bits // 8:,} bytes" if bits % 8 == 0 else f"{bits:,} bits, not a whole number of bytes"
            raise WeightFileError(
                f"{path}: damaged: tensor {name!r} ({t.dtype}, shape {list(t.shape)}) needs {needs}, "
                f"its data_offsets [{t.begin:,}, {t.end:,}] hold {t.end - t.begin:,} bytes"
            )
        if t.begin != at:  # the library loads only tensors laid end to end, from byte 0
            after = f"after tensor {previous!r}, which ends at {at:,}" if previous else "where the data starts, at 0"
            raise WeightFileError(
                f"{path}: damaged: tensor {name!r} begins at byte {t.begin:,} of the data, not right {after}"
            )
        at, previous = t.end, name
    return tensors


def read_weight_map(folder: str | Path) -> dict[str, str] | None:
    """The index of a sharded model (``model.safetensors.index.json``): tensor name -> file
    name; None when the folder has no index, a :class:`WeightFileError` when it is unreadable."""
    index = Path(folder) / INDEX_NAME
    if not index.is_file():
        return None
    try:
        data = json.loads(index.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise WeightFileError(f"{index}: cannot read it as JSON ({e})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise WeightFileError(f"{index}: no weight_map of tensor names to file names")
    return weight_map


def check_config_file(folder: str | Path) -> dict:
    """The folder's ``config.json`` as a JSON object with a ``model_type``, or a
    :class:`WeightFileError` naming it and what is wrong (every model rank's loader needs both)."""
    f = Path(folder) / "config.json"
    try:
        text = f.read_bytes().decode("utf-8")
    except OSError as e:
        raise WeightFileError(f"{f}: cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise WeightFileError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if text.startswith("\ufeff"):  # transformers' json.loads refuses it too
        raise WeightFileError(f"{f}: starts with a byte-order mark, which transformers cannot read: save it without")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise WeightFileError(f"{f}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise WeightFileError(f"{f}: a JSON {type(data).__name__}, not an object")
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise WeightFileError(
            f"{f}: no model_type (got {model_type!r}): transformers cannot tell which model class to "
            'build (e.g. "model_type": "llama")'
        )
    known = transformers_model_types(model_type)
    if model_type not in known:
        close = difflib.get_close_matches(model_type, known, n=3)
        hint = f" (close: {', '.join(close)})" if close else ""
        raise WeightFileError(
            f"{f}: model_type {model_type!r} is not one this transformers knows{hint}: "
            "the model ranks could not build it"
        )
    return data


def transformers_model_types(model_type: str) -> Collection[str]:
    """The ``model_type`` names transformers' ``AutoConfig`` builds, as far as needed to tell
    whether ``model_type`` is one of them (a name it does not know cannot be loaded).

    First transformers' generated table (``models/auto/auto_mappings.py``), read as text: the
    auto classes import torch, which the controller's rank must not do. Only a name not in that
    table costs the import (the live mapping also holds plug-ins' ``AutoConfig.register``
    types). If transformers cannot tell, every name passes: the loaders then say.
    """
    table = _generated_model_types()
    if table is not None and model_type in table:
        return table
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except Exception:  # noqa: BLE001 - a transformers laid out otherwise: not ours to refuse
        return {model_type}
    return set(CONFIG_MAPPING.keys()) | set(getattr(CONFIG_MAPPING, "_extra_content", {}))


def _generated_model_types() -> frozenset[str] | None:
    table = table_from_source("models/auto/auto_mappings.py", "CONFIG_MAPPING_NAMES")
    return None if table is None else frozenset(table)


def has_torch_weights(folder: str | Path) -> bool:
    """Whether the folder holds weights in torch's pickle format (``pytorch_model.bin``, or
    its shards and their index)."""
    return any((Path(folder) / name).is_file() for name in TORCH_WEIGHT_NAMES)


def has_safetensors(folder: str | Path) -> bool:
    return any(p.is_file() for p in Path(folder).glob("*.safetensors"))


def check_weight_files(folder: str | Path) -> int:
    """Every ``*.safetensors`` in ``folder`` read whole from its header (:func:`read_header`),
    and the index of a sharded model (``model.safetensors.index.json``), if any, checked
    against them: each file it names exists, and holds each tensor it maps there. Returns the
    number of files checked; the first problem is a :class:`WeightFileError`.

    A folder with no weights at all (a download that stopped early, the wrong folder) is
    refused. ``pytorch_model.bin`` weights are left to their loader.
    """
    folder = Path(folder)
    headers = {p.name: read_header(p) for p in sorted(folder.glob("*.safetensors")) if p.is_file()}
    index = folder / INDEX_NAME
    weight_map = read_weight_map(folder)
    if weight_map is None:
        if not headers and not has_torch_weights(folder):
            raise WeightFileError(
                f"{folder}: holds no weights (no *.safetensors, {INDEX_NAME} or pytorch_model.bin): "
                "point model.path at the folder save_pretrained wrote"
            )
        return len(headers)
    by_file: dict[str, list[str]] = {}
    for tensor, name in weight_map.items():
        by_file.setdefault(name, []).append(tensor)
    for name, tensors in by_file.items():
        if name not in headers:
            if not (folder / name).is_file():
                raise WeightFileError(
                    f"{index}: names {name!r} for {len(tensors):,} tensor{'s' if len(tensors) > 1 else ''} "
                    f"(e.g. {tensors[0]!r}), "
                    f"but there is no such file in {folder}"
                )
            headers[name] = read_header(folder / name)
        absent = [t for t in tensors if t not in headers[name]]
        if absent:
            shown = ", ".join(map(repr, absent[:3])) + (f", ... ({len(absent):,} in all)" if len(absent) > 3 else "")
            raise WeightFileError(f"{index}: maps tensors to {name!r} that it does not hold: {shown}")
    return len(headers)
