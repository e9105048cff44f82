"""The weight path from training ranks to generators: its settings, and the transport built from them.

Collective over the ranks that hold a model (launch/distributed.py's ``model_comm``): each calls
:func:`build_weight_transport` (the transfer-plan exchange involves all of them); colocated
ranks pass neither shards nor a need and get None. The handshake that drives the transport
each step is ``roles.protocol``'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from roles.sections.base import Section


class WeightsConfig(Section):
    """The role map's ``weights:`` section: how trained weights reach the generators."""

    # torch.distributed (gloo on CPU, NCCL on GPU), MPI buffers, or auto: see resolve_transport
    transport: Literal["auto", "torch", "mpi"] = "auto"
    bucket_mb: int = Field(64, gt=0, le=1 << 16)  # flat buffer size for bucketed point-to-point sends


# Where generators stage what they receive: host memory, for every engine (the torch engine
# samples on the CPU; vLLM copies the tensors onto its own device as it loads them).
RECEIVE_DEVICE = "cpu"


def send_device(kind: str, trainer_device: str, receive_device: str = RECEIVE_DEVICE) -> str:
    """The device trainers on ``trainer_device`` send their shards from, for weight transport
    ``kind`` (auto|torch|mpi) and generators staging on ``receive_device``; ValueError naming
    the field for a pair no transport moves.

    Both transports move bytes between buffers of one kind at both ends here (torch: gloo from
    CPU to CPU, NCCL from GPU to GPU, never between; mpi: GPU buffers only with a CUDA-aware
    MPI, which ``MPIChannel.check_device`` asks at start-up). So CUDA shards sent to generators that receive on
    the CPU go through host memory: one device-to-host copy of this rank's rows a push
    (``roles.policy.model.Policy.local_params``), then the transport ``kind`` resolves to as for
    CPU trainers. Two processes on one GPU (a single-GPU job) cannot use NCCL between them
    anyway: this is the path that works there.
    """
    if kind not in ("auto", "torch", "mpi"):
        raise ValueError(f"weights.transport: unknown transport {kind!r}: expected auto, torch or mpi")
    if trainer_device == receive_device:
        return trainer_device
    if receive_device == "cpu":
        return "cpu"
    raise ValueError(
        f"world.trainer.device: trainers on {trainer_device} cannot send to generators staging on "
        f"{receive_device} (gloo and NCCL do not cross devices): place the trainers on {receive_device}"
    )


def resolve_transport(kind: str, placements: list[tuple[str, str | None, bool]], synchronous: bool) -> str:
    """The transport ``kind`` means for ranks at ``placements``: each model rank's host, the
    device type of its trainer shards (None for a rank without) and whether MPI's shared memory
    can copy in one go there (``single_copy_shared_memory``).

    ``auto`` is ``torch`` (NCCL between GPUs, gloo between CPUs) except for CPU weights within
    one host in a synchronous run, where it is ``mpi``: there the push is the step's critical
    path, and Open MPI's shared memory moves it faster than gloo's loopback TCP. Asynchronous
    runs keep gloo: its threads move the bytes while the trainer computes, where an MPI send
    moves only when the trainer calls into MPI. So does a
    host whose ranks cannot read each other's memory (a container forbidding it): there an
    MPI message moves in fragments that each need the sender's next MPI call.
    """
    if kind != "auto":
        return kind
    one_host = len({host for host, _, _ in placements}) == 1
    on_cpu = all(device in (None, "cpu") for _, device, _ in placements)
    single_copy = all(ok for _, _, ok in placements)
    return "mpi" if one_host and on_cpu and single_copy and synchronous else "torch"


def build_weight_transport(config: WeightsConfig, comm, *, shards=None, need=None, synchronous: bool = False):
    """A ``WeightSender`` (a trainer passes its ``shards``), ``WeightReceiver`` (a generator
    passes its ``Need``) or None (every other rank). Collective over ``comm``.

    ``synchronous``: the run's ``max_staleness`` is 0 (it decides ``transport: auto``).
    copy=False: trainers send straight from the parameters' memory (a copy costs about as much
    as the transfer on CPU: bench/weight_sync.py direct_s vs direct_copy_s); the trainer makes
    optimizer.step() wait for the sends in flight (``WeightSender.guard``).
    """
    from mpi4py import MPI

    from transports.weights import make_weight_transport
    from transports.weights.mpi_buffers import single_copy_shared_memory

    shards = None if shards is None else list(shards)
    device = shards[0].tensor.device.type if shards else None
    single_copy = config.transport == "auto" and single_copy_shared_memory()
    # Every rank resolves alike, from what all of them found.
    placements = comm.allgather((MPI.Get_processor_name(), device, single_copy))
    kind = resolve_transport(config.transport, placements, synchronous)
    if config.transport == "auto" and comm.Get_rank() == 0:
        print(f"mpirl: weights: transport {kind} (auto)", flush=True)
    return make_weight_transport(
        kind, comm, shards=shards, need=need, bucket_bytes=config.bucket_mb * 1024 * 1024, copy=False
    )
