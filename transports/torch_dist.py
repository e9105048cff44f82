"""torch.distributed set up from MPI, in one place.

MPI already knows every rank, so there is no MASTER_ADDR/MASTER_PORT to configure: rank 0 of
``comm`` opens a TCPStore on a free port chosen by the OS (no race between choosing and
binding), broadcasts host and port over MPI, and every rank joins. torch ranks equal ranks of
``comm``. Backends: gloo for CPU tensors, NCCL for CUDA tensors (both at once when CUDA is
there and not told otherwise).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
from mpi4py import MPI

_store: dist.TCPStore | None = None  # keeps the rendezvous store alive with the process group


def init_torch_distributed(comm: MPI.Comm | None = None, backend: str | None = None, timeout_s: float = 300.0) -> None:
    """Join every rank of ``comm`` (default COMM_WORLD) into the default torch process group.

    Collective over ``comm``; a no-op when torch.distributed is already initialized (then the
    world must have ``comm``'s size). ``backend``: None = "gloo" without CUDA and
    "cpu:gloo,cuda:nccl" with it; or any torch backend string ("gloo", "nccl", ...). With NCCL
    each rank's current CUDA device is set to its rank among ``comm``'s ranks on its node,
    modulo the device count (in a job, ``comm`` holds the ranks with a model: the controller
    and reward ranks take no GPU).
    ``timeout_s`` bounds every collective and point-to-point wait (a hang becomes an error).
    The host rank 0 of ``comm`` publishes is ``MPIRL_MASTER_ADDR`` if set (it must be an
    address of rank 0's own node: anything else is refused, naming the node, rather than left
    for the others to time out on), 127.0.0.1 when all ranks share one node, else rank 0's
    fully qualified host name.
    """
    global _store
    comm = MPI.COMM_WORLD if comm is None else comm
    if dist.is_initialized():
        if dist.get_world_size() != comm.Get_size():
            raise RuntimeError(
                f"torch.distributed is already initialized with world size "
                f"{dist.get_world_size()}, not {comm.Get_size()}"
            )
        return
    rank, size = comm.Get_rank(), comm.Get_size()
    if backend is None:
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, one_node = node.Get_rank(), node.Get_size() == size
    node.Free()
    if "nccl" in backend:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    timeout = timedelta(seconds=timeout_s)
    addr, why = None, None
    if rank == 0:
        host = os.environ.get("MPIRL_MASTER_ADDR") or ("127.0.0.1" if one_node else socket.getfqdn())
        try:
            if os.environ.get("MPIRL_MASTER_ADDR"):
                _check_local_address(host)
            _store = dist.TCPStore(host, 0, size, is_master=True, timeout=timeout, wait_for_workers=False)
            addr = (host, _store.port)
        except Exception as e:  # tell the others instead of leaving them waiting
            why = f"rank {MPI.COMM_WORLD.Get_rank()} could not open the torch.distributed rendezvous store: {e}"
    addr, why = comm.bcast((addr, why), root=0)
    if addr is None:
        raise RuntimeError(why)
    if rank != 0:
        _store = dist.TCPStore(addr[0], addr[1], size, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=_store, rank=rank, world_size=size, timeout=timeout)


def _check_local_address(host: str) -> None:
    """``MPIRL_MASTER_ADDR`` names where the store listens: it must be an address of this node."""
    why = "it does not resolve"
    try:
        addresses = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except OSError:
        addresses = []
    for family, kind, proto, _, sockaddr in addresses:  # a name may resolve to IPv4 and IPv6 ones
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.bind(sockaddr)
            return
        except OSError as e:
            why = e.strerror
    raise ValueError(
        f"MPIRL_MASTER_ADDR={host} is not an address of {socket.gethostname()}, the node of rank "
        f"{MPI.COMM_WORLD.Get_rank()}, which opens the rendezvous store (the first rank that "
        f"holds a model); set it to an address of that node, or leave it unset ({why})"
    )


def new_group(ranks, backend: str | None = None, timeout_s: float | None = None):
    """A process group of ``ranks`` (torch global ranks); None on ranks outside it.

    Collective over the WHOLE torch world: every rank must call it, with the same ranks, in the
    same order as every other ``new_group``, even ranks that are not members.
    """
    timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
    ranks = sorted(int(r) for r in ranks)
    group = dist.new_group(ranks, timeout=timeout, backend=backend)
    return group if dist.get_rank() in ranks else None


def agree_max(group, *values: int) -> list[int]:
    """Each value's maximum over the group's ranks (one small all-reduce): ranks that act in
    lockstep (a sharded model) agree on what to do next."""
    t = torch.tensor(values, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [int(v) for v in t.tolist()]


def agree_min(group, *values: int) -> list[int]:
    """Each value's minimum over the group's ranks (``all`` of flags)."""
    t = torch.tensor(values, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return [int(v) for v in t.tolist()]
