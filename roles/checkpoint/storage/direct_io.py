"""Checkpoint files written with direct I/O: the bytes go from memory to the disk, not through
the page cache.

Why: torch.distributed.checkpoint's ``FileSystemWriter`` writes through the page cache and then
``fsync``\\ s each file, so a save copies every byte twice and waits for the kernel's writeback
(``bench/checkpoint.py`` compares it with ``dd oflag=direct``). :class:`DirectFileSystemWriter`
is the same writer (same files, same ``.metadata``; ``FileSystemReader`` loads them unchanged)
whose files are written by :class:`DirectWriteStream`: aligned chunks from a page-aligned
buffer through an ``O_DIRECT`` descriptor, the tail padded to the alignment and the file cut
back to its true length.

Each tensor is a small zip archive (``torch.save``), whose CRC-32 costs a large share of a
small save's time; ``torch.load`` never checks it (a flipped byte loads silently), so
:func:`without_zip_crc` turns it off for a save.

Where the filesystem refuses ``O_DIRECT`` (tmpfs, some network filesystems), the same chunks
go through an ordinary descriptor, so the writer works everywhere; ``fsync`` on close either
way, so a file is on the disk when its stream is closed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import mmap
import os
from collections.abc import Generator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.utils.serialization import config as serialization_config

from runtime.loop_clock import LOOP

# O_DIRECT wants offsets, lengths and memory aligned to the device's logical block (512 B or
# 4 KiB); 4 KiB suits both. A chunk of several MiB keeps the per-write cost negligible.
ALIGN = 4096
CHUNK_BYTES = 16 << 20
MEMMOVE_BYTES = 64 << 10


@contextlib.contextmanager
def without_zip_crc() -> Generator[None, None, None]:
    """``torch.save`` skips the zip CRC-32 inside this block (see the module docstring)."""
    before = serialization_config.save.compute_crc32
    serialization_config.save.compute_crc32 = False
    try:
        yield
    finally:
        serialization_config.save.compute_crc32 = before


def open_direct(path: str | os.PathLike) -> tuple[int, bool]:
    """A new write-only descriptor for ``path``, with ``O_DIRECT`` where the filesystem allows it.
    Returns ``(fd, direct)``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct, 0o644), True
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
    return os.open(path, flags, 0o644), False


class DirectWriteStream(io.RawIOBase):
    """A write-only file stream that writes whole aligned chunks, bypassing the page cache.

    ``write`` copies into one of two page-aligned buffers; each time it fills, a background
    thread writes it out while ``write`` goes on filling the other, so the copy and the disk
    overlap (both release the GIL). ``close`` writes the tail (padded to ``ALIGN``), cuts the
    file to the bytes written, and ``fsync``\\ s. ``flush`` writes nothing (a partial chunk
    would break the alignment of the next), so the file is complete only once closed, which is
    when DCP considers it written.
    """

    def __init__(self, path: str | os.PathLike, chunk_bytes: int | None = None):
        super().__init__()
        chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        if chunk_bytes <= 0 or chunk_bytes % ALIGN:
            raise ValueError(f"chunk_bytes must be a positive multiple of {ALIGN}, got {chunk_bytes}")
        self.path = Path(path)
        self._fd, self.direct = open_direct(path)
        self._buffers = [mmap.mmap(-1, chunk_bytes) for _ in range(2)]  # anonymous: page-aligned
        self._views = [memoryview(b) for b in self._buffers]
        self._addresses = [ctypes.addressof(ctypes.c_char.from_buffer(b)) for b in self._buffers]
        self._current = 0  # the buffer being filled; the other may be in flight
        self._in_flight: Future | None = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mpirl-direct-io")
        self._filled = 0  # bytes in the current buffer not yet written
        self._written = 0  # bytes handed to the disk (a multiple of the chunk)

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written + self._filled

    def fileno(self) -> int:
        return self._fd

    def write(self, data) -> int:
        if self.closed:
            raise ValueError("write to a closed DirectWriteStream")
        src = memoryview(data).cast("B")
        size, done = len(src), 0
        # ctypes.memmove releases the GIL (a memoryview slice assignment holds it), so the copy
        # runs beside the writer thread and other Python threads. Only for large pieces: the
        # headers written in between are a few bytes each.
        address = np.frombuffer(src, np.uint8).ctypes.data if size >= MEMMOVE_BYTES else None
        while done < size:
            view = self._views[self._current]
            n = min(size - done, len(view) - self._filled)
            if address is None:
                view[self._filled : self._filled + n] = src[done : done + n]
            else:
                ctypes.memmove(self._addresses[self._current] + self._filled, address + done, n)
            self._filled += n
            done += n
            if self._filled == len(view):
                self._hand_off(len(view))
        return size

    def flush(self) -> None:
        """Nothing to do before ``close`` (see the class docstring)."""

    def _hand_off(self, length: int) -> None:
        """Write the current buffer's first ``length`` bytes (a multiple of ALIGN) at the file's
        end in the background, once the previous write is done, and fill the other meanwhile."""
        self._wait_in_flight()
        self._in_flight = self._writer.submit(self._write_all, self._current, length, self._written)
        self._written += length
        self._current = 1 - self._current
        self._filled = 0

    def _write_all(self, buffer: int, length: int, offset: int) -> None:
        done = 0
        while done < length:
            with self._views[buffer][done:length] as rest:  # released at once: close frees the buffer
                done += os.pwrite(self._fd, rest, offset + done)
        LOOP.tick()  # a long save to a slow filesystem is progress, chunk by chunk

    def _wait_in_flight(self) -> None:
        if self._in_flight is not None:
            pending, self._in_flight = self._in_flight, None
            pending.result()  # a failed write raises here, in the writing thread's caller

    def close(self) -> None:
        if self.closed:
            return
        try:
            logical = self.tell()
            if self._filled:
                padded = -(-self._filled // ALIGN) * ALIGN
                self._views[self._current][self._filled : padded] = bytes(padded - self._filled)
                self._hand_off(padded)
            self._wait_in_flight()
            os.ftruncate(self._fd, logical)
            os.fsync(self._fd)
        finally:
            if self._in_flight is not None:  # an error above: let the write end before freeing
                with contextlib.suppress(Exception):
                    self._in_flight.result()
            self._writer.shutdown(wait=True)
            for view, buffer in zip(self._views, self._buffers):
                view.release()
                buffer.close()
            os.close(self._fd)
            super().close()


class DirectFileSystem(FileSystem):
    """DCP's local filesystem, with files opened for writing as :class:`DirectWriteStream`."""

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Generator[io.IOBase, None, None]:
        if mode != "wb":
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        stream = DirectWriteStream(path)
        try:
            yield stream
        finally:
            stream.close()


class DirectFileSystemWriter(FileSystemWriter):
    """``FileSystemWriter`` whose files (shards and ``.metadata``) are written with direct I/O and
    synced on close, so its own ``sync_files`` pass (an ``fsync`` before our tail is out) is off."""

    def __init__(self, path: str | os.PathLike, **kwargs):
        super().__init__(path, sync_files=False, **kwargs)
        self.fs = DirectFileSystem()
        self.path = self.fs.init_path(path)
