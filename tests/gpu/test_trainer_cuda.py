"""mpirl's trainer on a GPU (``world.trainer.device: cuda``): a policy FSDP2 shards over a CUDA
mesh, trained by ``roles.trainer.TrainerActor`` with its collectives over a group that has NCCL
for CUDA tensors beside gloo for the step's scalars, checkpointed (DCP shards, optimizer state,
the CUDA rng) and loaded back; the weight sync's host copies of the CUDA shards. One process
(a mesh of one GPU: FSDP2's code path, the collectives real), and two trainers on two GPUs
under mpirun (skipped on one)."""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist

from support.mpi_helpers import REPO, run_mpi

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@pytest.fixture
def train_group():
    from launch.distributed import CUDA_TRAIN_BACKEND

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(CUDA_TRAIN_BACKEND, rank=0, world_size=1, device_id=torch.device("cuda", 0))
    yield dist.group.WORLD
    dist.destroy_process_group()


def _check(result: dict) -> None:
    assert result["device"].startswith("cuda") and result["shards_on_device"], result
    assert all(map(torch.isfinite, map(torch.tensor, result["losses"] + result["grad_norms"]))), result
    assert result["first_step_moved"] and result["second_step_moved"], result
    assert result["weights_restored"] and result["optimizer_restored"] and result["optimizer_moved_since"], result
    # The second step taken again from the checkpoint: the same update (CUDA kernels may round differently).
    assert result["losses"][2] == pytest.approx(result["losses"][1], rel=1e-4, abs=1e-6), result
    assert result["step_retaken"] < 1e-5, result
    assert result["cuda_rng_saved"], result
    assert result["staged_on_cpu"] and result["staged_equal"], result


def test_a_fsdp2_trainer_steps_and_round_trips_a_checkpoint_on_cuda(train_group, tmp_path):
    from roles.policy.placement import trainer_device
    from roles.policy.sharding import shard_over, trainer_mesh
    from support.cuda_trainer import base_config, step_and_round_trip
    from support.tiny_models import tiny_llama

    device = trainer_device("cuda", 0)
    model = shard_over(tiny_llama().to(device), trainer_mesh(train_group, "cuda"))
    result = step_and_round_trip(base_config(tmp_path / "model"), model, train_group, 1, 0, tmp_path / "ckpt")
    print(json.dumps({"trainer_cuda": result}))
    _check(result)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_fsdp2_trainers_on_two_gpus(tmp_path):
    script = REPO / "tests" / "gpu" / "cuda_trainer_pair.py"
    result = run_mpi(2, [sys.executable, str(script), str(tmp_path)], timeout=240)
    assert result.rc == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"trainer_pair"')]
    assert len(lines) == 2, result.stdout[-3000:]
    for line in lines:
        _check(line["trainer_pair"])
    a, b = (line["trainer_pair"] for line in lines)
    # The gradient norm is over both ranks' shards (the losses are each rank's own); a GPU each.
    assert a["grad_norms"] == pytest.approx(b["grad_norms"], rel=1e-5) and a["device"] != b["device"]
