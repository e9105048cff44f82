"""Direct shard-to-generator weight sync (DDMA): a transfer plan and its two ends.

Typical use (collective over ``comm``, which holds the trainers and generators, and maybe
other ranks, which pass neither ``shards`` nor ``need`` and get None)::

    # trainer ranks
    sender = make_weight_transport("torch", comm, shards=local_shards(model), group=wg)
    sender.push(local_shards(model), version)  # copies the shards out, posts the sends, returns
    # generator ranks
    receiver = make_weight_transport("torch", comm, need=Need(), group=wg)
    receiver.start(version)        # ahead of the push: the sends then find the receives posted
    if receiver.ready(): engine.load_weights(receiver.finish())   # at a batch boundary
    receiver.start(version + 1)    # once loaded: the staging buffers are free again

A tensor-parallel generator passes ``Need(tp_rank, tp_size, split_dims)``, where
``split_dims`` lists ``(parameter name, dim)`` for each parameter that is split: the rules are
data handed in by the caller, the transport knows no model family.

Set-up errors on any rank (bad device, 0-d parameter, ...) are raised on every rank of ``comm``,
so no rank is left waiting in the exchange.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from mpi4py import MPI

from .endpoints import Channel, SyncStats, WeightReceiver, WeightSender
from .mpi_buffers import MPIChannel, mpi_cuda_aware
from .p2p import TorchChannel
from .plan import (
    DEFAULT_BUCKET_BYTES,
    Bucket,
    LocalShard,
    Need,
    ShardMeta,
    TransferPlan,
    build_plan,
    default_pack_below,
)

__all__ = [
    "Bucket",
    "Channel",
    "LocalShard",
    "MPIChannel",
    "Need",
    "ShardMeta",
    "SyncStats",
    "TorchChannel",
    "TransferPlan",
    "WeightReceiver",
    "WeightSender",
    "build_plan",
    "gather_plan",
    "make_weight_transport",
    "mpi_cuda_aware",
]


def gather_plan(
    comm: MPI.Comm,
    rank: int,
    *,
    shards: Iterable[LocalShard] | None = None,
    need: Need | None = None,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    pack_below: int | None = None,
) -> TransferPlan | None:
    """Exchange layout metadata once over ``comm`` (allgather, collective) and build the plan.

    ``rank`` is this rank's id in the channel's rank space. Trainers pass ``shards`` (only names,
    shapes, dtypes and rows travel), generators ``need``; the lowest trainer's ``bucket_bytes``
    and ``pack_below`` win (None: the default for the device of its shards, per peer: see
    ``build_plan``'s ``pack_below_per_peer``). Returns None when there are no trainers or no
    generators.
    """
    return _exchange(comm, rank, shards, need, bucket_bytes, pack_below, None)


def _exchange(comm, rank, shards, need, bucket_bytes, pack_below, err):
    metas, device_pack_below = None, None
    if err is None:
        try:
            if shards is not None and need is not None:
                raise ValueError("a rank is a trainer (shards) or a generator (need), not both")
            if shards is not None:
                shards = [LocalShard(*s) for s in shards]
                metas = [ShardMeta.of(s) for s in shards]
                if shards:
                    device_pack_below = default_pack_below(shards[0].tensor.device)
        except (TypeError, ValueError) as e:
            err = str(e)
    everyone = comm.allgather(
        (
            rank,
            metas,
            need,
            (bucket_bytes, pack_below, device_pack_below),
            None if err is None else f"rank {comm.Get_rank()}: {err}",
        )
    )
    errors = [e[4] for e in everyone if e[4] is not None]
    if errors:
        raise RuntimeError("cannot set up the weight sync: " + "; ".join(errors))
    trainers = {r: m for r, m, _, _, _ in everyone if m is not None}
    needs = {r: n for r, _, n, _, _ in everyone if n is not None}
    if not trainers or not needs:
        return None
    bb, pb, device_pb = next(cfg for r, m, _, cfg, _ in sorted(everyone, key=lambda e: e[0]) if m is not None)
    if pb is not None:  # asked for: taken as it is
        return build_plan(trainers, needs, bucket_bytes=bb, pack_below=pb)
    # The default grows with the generators a piece goes to (build_plan's pack_below_per_peer).
    default = device_pb if device_pb is not None else default_pack_below("cpu")
    return build_plan(trainers, needs, bucket_bytes=bb, pack_below=default, pack_below_per_peer=True)


def make_weight_transport(
    kind: str,
    comm: MPI.Comm,
    *,
    shards: Iterable[LocalShard] | None = None,
    need: Need | None = None,
    group=None,
    device: str | torch.device = "cpu",
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    pack_below: int | None = None,
    copy: bool = True,
):
    """A ``WeightSender`` (ranks with ``shards``), ``WeightReceiver`` (ranks with ``need``) or None.

    Collective over ``comm``. ``kind="torch"``: torch.distributed point-to-point over ``group``
    (None = the default group; torch must be initialized, see ``init_torch_distributed``).
    ``kind="mpi"``: MPI buffers over a duplicate of ``comm``; with CUDA tensors it requires a
    CUDA-aware MPI and says so otherwise. ``device``: where a generator stages what it receives
    (a sender uses its shards' device). ``copy``: see ``WeightSender``.
    """
    shards = None if shards is None else list(shards)
    if kind not in ("torch", "mpi"):
        raise ValueError(f"unknown weight transport {kind!r}: expected 'torch' or 'mpi'")
    wcomm = comm.Dup() if kind == "mpi" else None  # weight traffic never meets the caller's
    channel, err = None, None
    if shards is not None or need is not None:
        try:  # an error here is shared in the exchange, so no rank is left waiting
            channel = TorchChannel(group) if kind == "torch" else MPIChannel(wcomm)
            channel.check_device(shards[0][1].device if shards else torch.device(device))
        except (RuntimeError, ValueError) as e:
            err = str(e)
    rank = channel.rank if channel is not None else -1 - comm.Get_rank()
    try:
        plan = _exchange(comm, rank, shards, need, bucket_bytes, pack_below, err)
    except RuntimeError:
        if wcomm is not None:
            wcomm.Free()
        raise
    if plan is None or channel is None:
        if wcomm is not None:
            wcomm.Free()
        return None
    if shards is not None:
        return WeightSender(plan, channel, copy=copy)
    return WeightReceiver(plan, channel, device=device)
