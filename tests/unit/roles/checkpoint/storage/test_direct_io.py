"""roles/checkpoint/storage/direct_io.py: checkpoint files written with direct I/O are the files
DCP's own writer makes."""

from __future__ import annotations

import errno
import os

import pytest
import torch
import torch.distributed.checkpoint as dcp

from roles.checkpoint.storage import direct_io
from roles.checkpoint.storage.direct_io import ALIGN, DirectFileSystemWriter, DirectWriteStream, without_zip_crc

CHUNK = 2 * ALIGN  # small chunks, so a few KiB cross several chunk boundaries


def pieces() -> list[bytes]:
    """Writes of awkward sizes: tiny headers, exactly a chunk, one byte past, large ones."""
    rng = torch.Generator().manual_seed(0)
    sizes = [1, 7, ALIGN - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 0, 70_000, 13]
    return [bytes(torch.randint(0, 256, (n,), generator=rng, dtype=torch.uint8).tolist()) for n in sizes]


def test_the_file_holds_exactly_the_bytes_written_whatever_the_sizes(tmp_path):
    path = tmp_path / "f.bin"
    stream = DirectWriteStream(path, chunk_bytes=CHUNK)
    expected = b""
    for piece in pieces():
        assert stream.write(piece) == len(piece)
        expected += piece
        assert stream.tell() == len(expected)
    stream.close()
    assert path.read_bytes() == expected  # the padded tail is cut back to the true length
    assert stream.closed
    with pytest.raises(ValueError, match="closed"):
        stream.write(b"x")


def test_large_writes_from_tensors_and_memoryviews_are_copied_exactly(tmp_path):
    data = torch.arange(300_000, dtype=torch.int32)  # above MEMMOVE_BYTES: the GIL-free copy
    assert data.numel() * 4 >= direct_io.MEMMOVE_BYTES
    path = tmp_path / "t.bin"
    stream = DirectWriteStream(path, chunk_bytes=CHUNK)
    stream.write(memoryview(data.numpy()))
    stream.write(b"end")
    stream.close()
    raw = path.read_bytes()
    assert raw[-3:] == b"end"
    assert torch.equal(torch.frombuffer(bytearray(raw[:-3]), dtype=torch.int32), data)


def test_a_filesystem_without_o_direct_gets_the_same_file(tmp_path, monkeypatch):
    real_open = os.open

    def refuse_direct(path, flags, mode=0o777):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refuse_direct)
    stream = DirectWriteStream(tmp_path / "f.bin", chunk_bytes=CHUNK)
    assert not stream.direct
    for piece in pieces():
        stream.write(piece)
    stream.close()
    assert (tmp_path / "f.bin").read_bytes() == b"".join(pieces())


def test_other_open_errors_are_not_hidden(tmp_path):
    with pytest.raises(FileNotFoundError):
        DirectWriteStream(tmp_path / "no" / "such" / "dir" / "f.bin")


def test_the_chunk_must_be_aligned(tmp_path):
    with pytest.raises(ValueError, match="multiple of 4096"):
        DirectWriteStream(tmp_path / "f.bin", chunk_bytes=ALIGN + 1)


def state() -> dict:
    torch.manual_seed(0)
    return {
        "w": torch.randn(300, 257),
        "b": torch.randn(3),
        "i": torch.arange(11),
        "empty": torch.zeros(0, 4),
        "meta": {"step": 7, "name": "x"},
    }


def test_dcp_files_are_byte_for_byte_those_of_its_own_writer_and_load_back(tmp_path):
    saved = state()
    with without_zip_crc():
        dcp.save(saved, storage_writer=dcp.FileSystemWriter(tmp_path / "plain", thread_count=2), no_dist=True)
        dcp.save(saved, storage_writer=DirectFileSystemWriter(tmp_path / "direct", thread_count=2), no_dist=True)
    shards = sorted(p.name for p in (tmp_path / "plain").glob("*.distcp"))
    assert shards and shards == sorted(p.name for p in (tmp_path / "direct").glob("*.distcp"))
    for name in shards:
        assert (tmp_path / "direct" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name
    back = {k: torch.full_like(v, -1) for k, v in saved.items() if isinstance(v, torch.Tensor)}
    back["meta"] = {"step": 0, "name": ""}
    dcp.load(back, checkpoint_id=str(tmp_path / "direct"), no_dist=True)  # DCP's own reader
    for key, value in saved.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(back[key], value), key
    assert back["meta"] == saved["meta"]


def test_the_zip_crc_setting_is_restored_even_after_an_error():
    from torch.utils.serialization import config

    before = config.save.compute_crc32
    with pytest.raises(RuntimeError), without_zip_crc():
        assert config.save.compute_crc32 is False
        raise RuntimeError("boom")
    assert config.save.compute_crc32 == before
