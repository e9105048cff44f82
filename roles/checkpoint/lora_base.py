"""The base a LoRA checkpoint's adapters were trained on, recorded and checked.

A LoRA run's checkpoint holds the adapters and their optimizer state only: the frozen base is
read again from ``model.path`` on resume and on ``mpirl export``. So the checkpoint records
what that base was (``lora_base.json``: every weight tensor's name, dtype and shape, read from
the safetensors headers; for other weight files, their names and sizes), and a resume or an
export first checks that ``model.path`` still holds it. A base that is gone or has another
shape is refused, naming the first difference. The values are not hashed (reading gigabytes
on every resume): a folder rewritten with other weights of the same shapes is not caught.

Torch-free (a safetensors header is JSON): the controller's rank checks it before any rank starts.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from roles.checkpoint.layout import CheckpointIOError, write_json

BASE_RECORD = "lora_base.json"


def describe_base(model_path: str | Path) -> dict:
    """The weights of the model folder at ``model_path``: ``{"tensors": {name: [dtype, shape]}}``
    from its safetensors files, or ``{"files": {name: bytes}}`` when it has none."""
    folder = Path(model_path)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{str(folder)!r} is not a model folder (no config.json)")
    tensors = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(_safetensors_header(f))
    if tensors:
        return {"tensors": tensors}
    files = {f.name: f.stat().st_size for f in sorted(folder.glob("*.bin"))}
    if not files:
        raise FileNotFoundError(f"{str(folder)!r} holds no weight files (*.safetensors, *.bin)")
    return {"files": files}


def _safetensors_header(f: Path) -> dict:
    with open(f, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    return {n: [v["dtype"], list(v["shape"])] for n, v in header.items() if n != "__metadata__"}


def record_base(checkpoint: str | Path, model_path: str | Path) -> None:
    """Write ``lora_base.json`` into ``checkpoint``: the base at ``model_path`` as it is now."""
    write_json(Path(checkpoint) / BASE_RECORD, {"path": str(model_path), **describe_base(model_path)})


def check_base(checkpoint: str | Path, model_path: str | Path) -> None:
    """CheckpointIOError unless ``model_path`` holds the base ``checkpoint``'s adapters were trained
    on (what its ``lora_base.json`` records). A checkpoint without the record holds its whole model."""
    f = Path(checkpoint) / BASE_RECORD
    if not f.is_file():
        return
    try:
        recorded = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointIOError(f"{f}: damaged ({e})") from e
    holds = "holds a LoRA run's adapters only, whose base is read from model.path"
    try:
        now = describe_base(model_path)
    except FileNotFoundError as e:
        raise CheckpointIOError(f"checkpoint {checkpoint} {holds}: {e} (restore the base model there)") from None
    difference = _first_difference(recorded, now)
    if difference:
        raise CheckpointIOError(
            f"checkpoint {checkpoint} {holds}, and the base at {str(model_path)!r} is not the one its "
            f"adapters were trained on: {difference} (restore that model there)"
        )


def _first_difference(recorded: dict, now: dict) -> str | None:
    for kind in ("tensors", "files"):
        was, is_ = recorded.get(kind), now.get(kind)
        if was is None and is_ is None:
            continue
        if was is None or is_ is None:
            return f"its weights were {'safetensors' if was is None else 'other'} files, now they are not"
        for name in sorted(set(was) | set(is_)):
            if name not in is_:
                return f"{name} is missing"
            if name not in was:
                return f"{name} was not in it"
            if list(was[name]) != list(is_[name]):
                return f"{name} was {_shown(was[name])}, now {_shown(is_[name])}"
    return None


def _shown(entry) -> str:
    return f"{entry[0]} {entry[1]}" if isinstance(entry, list) else f"{entry} bytes"
