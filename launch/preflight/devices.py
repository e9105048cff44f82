"""The trainers' devices against the GPUs their ranks see: the one check of a job that needs
every rank's answer (``mpirl check`` on a login node cannot tell what the compute nodes see).

Each rank of the job reports its host and role, and a trainer rank whose ``world.trainer.device``
is not ``cpu`` how many GPUs it sees; rank 0 checks them all (``launch/main.py``) and every rank
leaves with exit 2 on a problem, before any collective work:

- ``cuda`` on a trainer rank that sees no GPU;
- two trainer ranks on one GPU (a trainer takes its node's GPU slot modulo the GPUs it sees,
  as ``launch.distributed.gpu_slot`` orders them): FSDP2's collectives run on NCCL, which takes
  one GPU per rank of a group (one trainer may share its GPU with a generator);
- ``auto`` that would put some trainers on a GPU and others on the CPU: they shard together.

Knows nothing of torch beyond asking a trainer rank for its GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from roles.policy.placement import FIELD, wants_cuda


@dataclass(frozen=True)
class RankReport:
    """What one rank says of itself for the check."""

    host: str
    role: str
    gpus: int | None = None  # CUDA devices it sees (trainers whose device is not cpu); None: not asked


def rank_report(cfg, rank: int, host: str) -> RankReport:
    """This rank's report: torch is asked only on a trainer rank that may take a GPU."""
    role = cfg.world.roles_by_rank()[rank]
    if role != "trainer" or cfg.world.trainer.device == "cpu":
        return RankReport(host, role)
    import torch

    return RankReport(host, role, torch.cuda.device_count() if torch.cuda.is_available() else 0)


def device_problem(wanted: str, reports: list[RankReport]) -> str | None:
    """What is wrong with the trainers' devices (one line naming the field), or None."""
    if wanted == "cpu":
        return None
    from launch.distributed import node_slot

    ranks_of: dict[str, list[int]] = defaultdict(list)
    for rank, r in enumerate(reports):
        ranks_of[r.host].append(rank)
    trainers = [rank for rank, r in enumerate(reports) if r.role == "trainer"]
    on_gpu: dict[tuple[str, int], int] = {}
    on_cpu = []
    for rank in trainers:
        r = reports[rank]
        if not wants_cuda(wanted, bool(r.gpus)):
            on_cpu.append(rank)
            continue
        if not r.gpus:
            return (
                f"{FIELD} is cuda, but trainer rank {rank} (on {r.host}) sees no GPU: set it to cpu or "
                "auto, or run the trainers where GPUs are (CUDA_VISIBLE_DEVICES, a CUDA build of torch)"
            )
        node = ranks_of[r.host]
        gpu = node_slot([reports[i].role for i in node], node.index(rank)) % r.gpus
        other = on_gpu.setdefault((r.host, gpu), rank)
        if other != rank and len(trainers) > 1:
            return (
                f"{FIELD} is {wanted}: trainer ranks {other} and {rank} both take GPU {gpu} of {r.host} "
                f"({r.gpus} seen there); FSDP2 shards over NCCL, which takes one GPU per trainer: give "
                "the node a GPU per model rank, use fewer trainer ranks, or set it to cpu"
            )
    if on_cpu and on_gpu:
        return (
            f"{FIELD} is auto: trainer ranks {sorted(on_gpu.values())} see a GPU and {on_cpu} do not; "
            "trainers shard their model together, on one kind of device: set it to cpu or cuda"
        )
    return None
