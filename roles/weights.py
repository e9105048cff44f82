"""The weight path from training ranks to generators: its settings, and the transport built from them.

Collective over the ranks that hold a model (launch/job.py's ``model_comm``): each calls
:func:`build_weight_transport` (the transfer-plan exchange involves all of them); colocated
ranks pass neither shards nor a need and get None. The handshake that drives the transport
each step is ``roles.protocol``'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from roles.section import Section


class WeightsConfig(Section):
    """The role map's ``weights:`` section: how trained weights reach the generators."""

    transport: Literal["torch", "mpi"] = "torch"  # torch.distributed (gloo/NCCL) or MPI buffers
    bucket_mb: int = Field(64, gt=0, le=1 << 16)  # flat buffer size for bucketed point-to-point sends


def build_weight_transport(config: WeightsConfig, comm, *, shards=None, need=None):
    """A ``WeightSender`` (a trainer passes its ``shards``), ``WeightReceiver`` (a generator
    passes its ``Need``) or None (every other rank). Collective over ``comm``.

    copy=False: trainers send straight from the parameters' memory (a copy costs about as much
    as the transfer on CPU: bench/weight_sync.py direct_s vs direct_copy_s); the trainer makes
    optimizer.step() wait for the sends in flight (``WeightSender.guard``).
    """
    from transports.weights import make_weight_transport

    return make_weight_transport(
        config.transport, comm, shards=shards, need=need, bucket_bytes=config.bucket_mb * 1024 * 1024, copy=False
    )
