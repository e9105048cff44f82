"""roles/checkpoint/storage/raw_shards.py: DCP checkpoints whose shard files hold raw tensor bytes
load back exactly."""

from __future__ import annotations

import errno
import os
import threading

import pytest
import torch
import torch.distributed.checkpoint as dcp

from roles.checkpoint.layout import CheckpointIOError
from roles.checkpoint.storage import direct_io
from roles.checkpoint.storage.raw_shards import RAW_SUFFIX, RawShardReader, RawShardWriter
from roles.checkpoint.trainer_state import load_trainer_state, save_trainer_state


def state() -> dict:
    torch.manual_seed(0)
    return {
        "w": torch.randn(300, 257),
        "half": torch.randn(17, 5).to(torch.bfloat16),
        "i": torch.arange(11),
        "mask": torch.rand(40) > 0.5,
        "step": torch.tensor(7.0),  # 0-dim, as AdamW's step
        "empty": torch.zeros(0, 4),
        "strided": torch.randn(64, 32).t(),  # not contiguous: saved by value
        "meta": {"step": 7, "name": "x", "groups": [{"lr": 1e-3}]},
    }


def blank(saved: dict) -> dict:
    back = {
        k: torch.full_like(v, -1) if v.dtype != torch.bool else torch.zeros_like(v)
        for k, v in saved.items()
        if isinstance(v, torch.Tensor)
    }
    back["meta"] = {"step": 0, "name": "", "groups": [{"lr": 0.0}]}
    return back


def save(saved: dict, path) -> None:
    dcp.save(saved, storage_writer=RawShardWriter(path), no_dist=True)


def test_every_dtype_and_shape_loads_back_bit_for_bit(tmp_path):
    saved = state()
    save(saved, tmp_path / "ck")
    files = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert files == [".metadata", f"__0_0{RAW_SUFFIX}"]  # one raw file for the one rank
    back = blank(saved)
    dcp.load(back, storage_reader=RawShardReader(tmp_path / "ck"), no_dist=True)
    for key, value in saved.items():
        if isinstance(value, torch.Tensor):
            assert back[key].dtype == value.dtype and torch.equal(back[key], value), key
    assert back["meta"] == saved["meta"]


def test_the_file_is_the_tensors_bytes_as_they_lie_in_memory(tmp_path):
    saved = {"a": torch.arange(1000, dtype=torch.int32), "b": torch.full((3, 3), 2.5)}
    save(saved, tmp_path / "ck")
    raw = (tmp_path / "ck" / f"__0_0{RAW_SUFFIX}").read_bytes()
    expected = {bytes(t.numpy().tobytes()) for t in saved.values()}
    assert len(raw) == sum(len(b) for b in expected)  # no archive around them
    assert all(b in raw for b in expected)


def test_a_load_into_another_dtype_casts_like_copy(tmp_path):
    saved = {"w": torch.randn(8, 8)}
    save(saved, tmp_path / "ck")
    back = {"w": torch.zeros(8, 8, dtype=torch.float64)}
    dcp.load(back, storage_reader=RawShardReader(tmp_path / "ck"), no_dist=True)
    assert torch.equal(back["w"], saved["w"].double())


def test_folders_written_by_dcps_own_writer_still_load(tmp_path):
    saved = state()
    dcp.save(saved, storage_writer=dcp.FileSystemWriter(tmp_path / "plain"), no_dist=True)
    back = blank(saved)
    dcp.load(back, storage_reader=RawShardReader(tmp_path / "plain"), no_dist=True)
    for key, value in saved.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(back[key], value), key


def test_dcps_stock_reader_refuses_raw_files_rather_than_loading_garbage(tmp_path):
    from torch.distributed.checkpoint.api import CheckpointException

    save({"w": torch.randn(64, 64)}, tmp_path / "ck")
    back = {"w": torch.zeros(64, 64)}
    with pytest.raises(CheckpointException, match="Weights only load failed|zip"):
        dcp.load(back, checkpoint_id=str(tmp_path / "ck"), no_dist=True)


def linear_with_adamw(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(512, 600)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 512)).sum().backward()
    opt.step()
    return model, opt


def test_a_truncated_shard_file_is_an_error_that_names_the_tensor(tmp_path):
    model, opt = linear_with_adamw(0)
    save_trainer_state(tmp_path, model, opt, None)
    shard = tmp_path / "trainer" / f"__0_0{RAW_SUFFIX}"
    os.truncate(shard, shard.stat().st_size - 100)
    fresh, fresh_opt = linear_with_adamw(1)
    with pytest.raises(
        CheckpointIOError,
        match=r"loading the trainer state from .* failed \(trainer 0: EOFError: checkpoint file ends before "
        r".*\(\d+ bytes at \d+ of __0_0.raw\) \(truncated",
    ):
        load_trainer_state(tmp_path, fresh, fresh_opt, None)


def test_a_disk_error_in_the_background_write_reaches_the_save(tmp_path, monkeypatch):
    real = os.pwrite

    def full_disk(fd, data, offset):
        if offset > 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    model, opt = linear_with_adamw(0)  # 3.7 MB: more than one chunk of the small ones below
    monkeypatch.setattr(os, "pwrite", full_disk)
    monkeypatch.setattr(direct_io, "CHUNK_BYTES", 1 << 20)
    with pytest.raises(
        CheckpointIOError,
        match=r"saving the trainer state into .* failed \(trainer 0: OSError: .*No space left",
    ):
        save_trainer_state(tmp_path, model, opt, None)
    assert not (tmp_path / "trainer" / ".metadata").exists()  # no checkpoint claims to be whole
    # The background writer is gone too (other tests' threads may still run: name it).
    assert not [t for t in threading.enumerate() if t.name.startswith("mpirl-direct-io")]
