"""Run by tests/gpu/test_trainer_cuda.py under ``mpirun -n 2`` on two GPUs: two trainer ranks as a
job sets them up (``init_torch_distributed``, the trainers' group with ``train_group_backend``,
``trainer_device``, ``shard_model``), then support/cuda_trainer.py's steps and checkpoint round trip.
Prints one JSON line per rank. ``cuda_trainer_pair.py OUT cpu`` runs the same on the CPU (gloo):
a check of the script itself on a machine without GPUs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [
    str(Path(__file__).resolve().parents[2]),
    str(Path(__file__).resolve().parents[1]),
    str(Path(__file__).parent),
]

from mpi4py import MPI  # noqa: E402


def main(out: Path, device: str) -> None:
    import torch

    from launch.distributed import train_group_backend
    from roles.policy.placement import trainer_device
    from roles.policy.sharding import shard_model
    from support.cuda_trainer import base_config, step_and_round_trip
    from support.tiny_models import tiny_llama
    from transports.torch_dist import init_torch_distributed, new_group

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm, timeout_s=120)
    group = new_group([0, 1], backend=train_group_backend(device, torch.cuda.is_available()))
    model = shard_model(tiny_llama().to(trainer_device(device, rank)), group)
    config = base_config(out / f"model-{rank}")
    result = step_and_round_trip(config, model, group, 2, rank, out / "ckpt")
    print(json.dumps({"trainer_pair": result}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "cuda")
