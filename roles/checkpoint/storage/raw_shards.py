"""torch.distributed.checkpoint storage whose shard files hold each tensor's raw bytes.

DCP's own ``FileSystemWriter`` wraps every tensor in a ``torch.save`` zip archive: a few dozen
small writes per tensor, two files per rank with two threads, and on load a ``torch.load``
into a fresh tensor that is then copied into the model. For a small model saved by several
trainers on one host that overhead is most of the save (``bench/checkpoint.py``). Here the
planning, the ``.metadata`` file, resharding and the atomic folder are DCP's, unchanged; only
the bytes differ:

- each rank writes one file, ``__<rank>_0.raw``, through :class:`direct_io.DirectWriteStream`
  (direct I/O, the copy into its buffer overlapped with the disk write): every tensor's bytes
  as they lie in memory (a GPU shard's copied to host memory first), one after another, and
  the pickled non-tensor items (``BYTE_IO``) as DCP made them;
- the ``.metadata`` records each item's file, offset and length in DCP's own ``_StorageInfo``;
  dtype and shape are in the metadata already (the chunk of the tensor it is);
- :class:`RawShardReader` reads straight into the tensor it loads into (through host memory
  for a GPU tensor), and only the bytes that tensor needs: when DCP reshards (another number
  of trainers) a rank reads its rows of each saved chunk, not the whole chunk.

The files are not ``torch.save`` archives, so DCP's stock ``FileSystemReader`` cannot load
them: it stops with an unpickling error rather than loading wrong values. Everything in
mpirl that loads a checkpoint uses :class:`RawShardReader`, which also still loads folders
written by DCP's own writer (files not ending in ``.raw`` go to it unchanged).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, TensorStorageMetadata
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from roles.checkpoint.storage.direct_io import DirectFileSystemWriter, DirectWriteStream
from runtime.loop_clock import LOOP

RAW_SUFFIX = ".raw"


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A tensor's elements as bytes, without a copy when it is already contiguous."""
    flat = tensor.detach().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


class RawShardWriter(DirectFileSystemWriter):
    """DCP's writer with one raw-bytes file per rank (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, **kwargs):
        kwargs.setdefault("single_file_per_rank", True)
        if not kwargs["single_file_per_rank"]:
            raise ValueError("RawShardWriter writes one file per rank")
        super().__init__(path, **kwargs)

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        name = f"{plan.storage_data.prefix}0{RAW_SUFFIX}"
        results: list[WriteResult] = []
        # Non-tensor items first: they are small, and resolving them early keeps a tensor's
        # bytes (often large) the only thing in flight while the disk writes.
        items = sorted(plan.items, key=lambda item: item.type != WriteItemType.BYTE_IO)
        with DirectWriteStream(Path(self.path) / name) as stream:
            for item in items:
                data = planner.resolve_data(item)
                if item.type == WriteItemType.BYTE_IO:
                    if not isinstance(data, io.BytesIO):
                        raise TypeError(f"{item.index.fqn}: a BYTE_IO item must resolve to io.BytesIO")
                    piece = data.getbuffer()
                else:
                    if not isinstance(data, torch.Tensor):
                        raise TypeError(f"{item.index.fqn}: a tensor item must resolve to a tensor")
                    if data.device.type != "cpu":  # a GPU trainer's shard: through host memory
                        data = data.detach().to("cpu")
                    piece = tensor_bytes(data)
                offset = stream.tell()
                stream.write(piece)
                results.append(
                    WriteResult(
                        index=item.index,
                        size_in_bytes=len(piece),
                        storage_data=_StorageInfo(name, offset, len(piece)),
                    )
                )
        done: Future[list[WriteResult]] = Future()
        done.set_result(results)
        return done


def _chunk_shape(metadata: Metadata, index: MetadataIndex) -> tuple[torch.dtype, torch.Size]:
    """The dtype and shape of the saved chunk ``index`` names."""
    entry = metadata.state_dict_metadata[index.fqn]
    if not isinstance(entry, TensorStorageMetadata):
        raise TypeError(f"{index.fqn} is not a tensor in this checkpoint")
    for chunk in entry.chunks:
        if chunk.offsets == index.offset:
            return entry.properties.dtype, chunk.sizes
    raise KeyError(f"{index.fqn} has no saved chunk at offset {tuple(index.offset or ())}")


def _read_exactly(fd: int, into: memoryview, offset: int, what: str) -> None:
    done = 0
    while done < len(into):
        n = os.preadv(fd, [into[done:]], offset + done)
        if n == 0:
            raise EOFError(f"checkpoint file ends before {what} (truncated or overwritten?)")
        done += n


class RawShardReader(FileSystemReader):
    """Loads what :class:`RawShardWriter` wrote, and DCP's own files (see the module docstring)."""

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args, **kwargs) -> None:
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)
        self.metadata = metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        raw: dict[str, list[ReadItem]] = {}
        others: list[ReadItem] = []
        for item in plan.items:
            path = self.storage_data[item.storage_index].relative_path
            (raw.setdefault(path, []) if path.endswith(RAW_SUFFIX) else others).append(item)
        if others:
            super().read_data(LoadPlan(others, plan.storage_data), planner).wait()
        for path, items in raw.items():
            fd = os.open(Path(self.path) / path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                # In file order: the disk reads forward.
                for item in sorted(items, key=lambda it: self.storage_data[it.storage_index].offset):
                    self._read_item(fd, item, planner)
                    LOOP.tick()
            finally:
                os.close(fd)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def _read_item(self, fd: int, item: ReadItem, planner: LoadPlanner) -> None:
        info: _StorageInfo = self.storage_data[item.storage_index]
        what = f"{item.storage_index.fqn} ({info.length} bytes at {info.offset} of {info.relative_path})"
        if item.type == LoadItemType.BYTE_IO:
            data = bytearray(info.length)
            _read_exactly(fd, memoryview(data), info.offset, what)
            planner.load_bytes(item, io.BytesIO(data))
            return
        dtype, shape = _chunk_shape(self.metadata, item.storage_index)
        element = torch.empty((), dtype=dtype).element_size()
        if element * shape.numel() != info.length:
            raise ValueError(
                f"{what}: the metadata's shape {tuple(shape)} of {dtype} needs {element * shape.numel()} bytes"
            )
        target = planner.resolve_tensor(item).detach()
        wanted = tuple(item.lengths)
        if target.shape != wanted:
            raise ValueError(f"{what}: loads {wanted} into {tuple(target.shape)}")
        start, rows = self._row_range(item, shape)
        if rows is not None:
            # The piece asked for is whole rows of the chunk (always so for FSDP's dim-0
            # shards, also when resharding): one contiguous byte range of the file.
            row_bytes = element * (shape[1:].numel() if len(shape) > 1 else 1)
            in_place = target.device.type == "cpu" and target.dtype == dtype and target.is_contiguous()
            into = target if in_place else torch.empty(wanted, dtype=dtype)  # else read, then copy (a GPU)
            if into.numel():
                _read_exactly(fd, tensor_bytes(into), info.offset + start * row_bytes, what)
        else:
            whole = torch.empty(shape, dtype=dtype)
            if whole.numel():
                _read_exactly(fd, tensor_bytes(whole), info.offset, what)
            into = whole
            for dim, (offset, length) in enumerate(zip(item.storage_offsets, item.lengths)):
                into = into.narrow(dim, offset, length)
        if into is not target:
            target.copy_(into)
        planner.commit_tensor(item, target)

    @staticmethod
    def _row_range(item: ReadItem, shape: torch.Size) -> tuple[int, int | None]:
        """``(first row, rows)`` when the item reads whole rows of its chunk, else ``(0, None)``."""
        if len(shape) == 0:
            return 0, 1
        offsets, lengths = tuple(item.storage_offsets), tuple(item.lengths)
        if any(offsets[d] != 0 or lengths[d] != shape[d] for d in range(1, len(shape))):
            return 0, None
        return offsets[0], lengths[0]
