"""Where a trainer rank trains: the role map's ``world.trainer.device`` resolved on this rank.

``cpu`` (the default), ``cuda`` (this rank's GPU: its slot among its node's model ranks,
``launch.distributed.gpu_slot``, modulo the GPUs it sees) or ``auto`` (``cuda`` when the rank
sees a GPU, else ``cpu``). A trainer on CUDA holds its policy there and FSDP2 shards it over a
mesh of CUDA devices; the trainers' group then has NCCL for CUDA tensors beside gloo for the
CPU ones (``launch.distributed.train_group_backend``).

Knows nothing of the role map's other fields or of the weight sync (``weight_transport``).
torch is imported only to place a trainer: the launch's checks read :func:`wants_cuda` without it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

FIELD = "world.trainer.device"


def wants_cuda(wanted: str, cuda_available: bool) -> bool:
    """Whether ``wanted`` (cpu|cuda|auto) puts a trainer on CUDA on a rank that sees a GPU or not."""
    if wanted not in ("cpu", "cuda", "auto"):
        raise ValueError(f"{FIELD}: unknown device {wanted!r}: expected cpu, cuda or auto")
    return wanted == "cuda" or (wanted == "auto" and cuda_available)


def trainer_device(wanted: str, gpu_slot: int) -> torch.device:
    """This trainer rank's device, made the current CUDA device when it is one. A node with
    fewer GPUs than model ranks shares them round-robin, said once in the log (a trainer may
    share its GPU with a generator, not with another trainer: ``launch.preflight.devices``)."""
    import torch

    if wanted == "cpu" or not wants_cuda(wanted, torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():  # the launch refuses it before any work (launch.preflight.devices)
        raise RuntimeError(f"{FIELD} is cuda, but this trainer rank sees no GPU")
    count = torch.cuda.device_count()
    if gpu_slot >= count:
        log.warning(
            "trainer rank: GPU slot %d of a node with %d GPUs: it shares GPU %d", gpu_slot, count, gpu_slot % count
        )
    device = torch.device("cuda", gpu_slot % count)
    torch.cuda.set_device(device)
    return device
