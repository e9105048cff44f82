"""FSDP2 on a GPU: the trainers' sharding (roles/policy/sharding.py) over an NCCL group, one
process here (the shard is the whole model, the collectives real), a step's backward and update
finite, and the weight plan's local shards on the device."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist

from support.tiny_models import tiny_llama

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@pytest.fixture
def nccl_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_fsdp2_shards_and_trains_on_cuda(nccl_group):
    from torch.distributed.fsdp import fully_shard

    from roles.policy.sharding import local_shards, trainer_mesh

    model = tiny_llama().cuda()
    mesh = trainer_mesh(nccl_group, "cuda")
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 37, (2, 8), device="cuda")
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    shards = local_shards(model)
    assert shards and all(s.tensor.is_cuda for s in shards)
