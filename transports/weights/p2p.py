"""Weight channel over torch.distributed point-to-point: gloo on CPU, NCCL on GPU.

Ranks are torch.distributed global ranks. ``group`` is a process group of the trainers and
generators (or None: the default group). A bucket travels to each of its generators as one
``isend``/``irecv`` of a flat uint8 tensor; messages between one trainer and one generator are
posted in the same order on both ends, so they match in order (gloo also matches them by tag;
NCCL ignores tags).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class TorchChannel:
    def __init__(self, group: dist.ProcessGroup | None = None):
        if not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialized: call transports.torch_dist.init_torch_distributed() first"
            )
        self.group = group
        self.rank = dist.get_rank()

    # On CPU the process group's own send/recv are called directly: dist.isend's checks cost
    # about 15 us a call, which adds up over the ~150 messages of a small model's sync (gloo
    # on 2 cores: 0.70-0.82 -> 0.78-0.82 of raw bandwidth at 25M, bench/weight_sync.py).
    def isend(self, buf: torch.Tensor, dst: int, tag: int):
        if not buf.is_cuda:
            return self._pg.send([buf], self._group_rank(dst), tag)
        return dist.isend(buf, dst=dst, group=self.group, tag=self._tag(buf, tag))

    def irecv(self, buf: torch.Tensor, src: int, tag: int):
        if not buf.is_cuda:
            return self._pg.recv([buf], self._group_rank(src), tag)
        return dist.irecv(buf, src=src, group=self.group, tag=self._tag(buf, tag))

    @property
    def _pg(self) -> dist.ProcessGroup:
        return self.group or dist.group.WORLD

    def _group_rank(self, global_rank: int) -> int:
        return global_rank if self.group is None else dist.get_group_rank(self.group, global_rank)

    def wait(self, handle) -> None:
        handle.wait()

    def test(self, handle) -> bool:
        return handle.is_completed()

    def pollable(self, device: torch.device) -> bool:
        # gloo's recv work reports completion only from inside wait(); NCCL's is_completed()
        # queries its CUDA event.
        return device.type != "cpu"

    def posts_block(self, device: torch.device) -> bool:
        # gloo writes a send's bytes to the peer's socket while the send is being posted (a
        # loopback copy of the whole buffer); NCCL queues it on a CUDA stream.
        return device.type == "cpu"

    def check_device(self, device: torch.device) -> None:
        backend = str(dist.get_backend(self.group))
        if device.type == "cuda" and "nccl" not in backend:
            raise RuntimeError(
                f"weights on {device} need an NCCL process group; this one is "
                f"{backend!r} (init_torch_distributed(backend='nccl'))"
            )
        if device.type == "cpu" and "gloo" not in backend:
            raise RuntimeError(f"weights on CPU need a gloo process group; this one is {backend!r}")

    @staticmethod
    def _tag(buf: torch.Tensor, tag: int) -> int:
        return 0 if buf.is_cuda else tag  # NCCL does not take tags
