"""Run by tests/gpu/test_nccl_sync.py under ``mpirun -n 2``: rank 0 a trainer holding a model on
GPU 0, rank 1 a generator on GPU 1; two pushes over NCCL (the torch transport's CUDA path),
each received bit for bit. Prints one JSON line on rank 1."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from roles.policy.sharding import local_shards  # noqa: E402
from support.tiny_models import tiny_llama  # noqa: E402
from transports.torch_dist import init_torch_distributed  # noqa: E402
from transports.weights import Need, make_weight_transport  # noqa: E402


def main() -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm)  # cpu:gloo,cuda:nccl; each rank on its own GPU
    model = tiny_llama().cuda() if rank == 0 else None
    ep = make_weight_transport(
        "torch", comm, shards=local_shards(model) if rank == 0 else None,
        need=Need() if rank == 1 else None, device="cuda",
    )  # fmt: skip
    seconds = []
    for version in (1, 2):
        if rank == 0:
            expected = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
            ep.push(local_shards(model), version)
            ep.wait()
            comm.send(expected, dest=1)
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(0.5)
        else:
            t0 = time.perf_counter()
            ep.start(version)
            while not ep.ready():
                time.sleep(0.001)
            got = dict(ep.finish())
            seconds.append(time.perf_counter() - t0)
            expected = comm.recv(source=0)
            assert set(got) == set(expected)
            for name, want in expected.items():
                assert got[name].is_cuda and torch.equal(got[name].cpu(), want), name
    if rank == 1:
        print(json.dumps({"nccl_sync": "ok", "versions": 2, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
