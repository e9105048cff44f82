"""The collective set-up every rank does first, in the same order whatever its role.

1. the role table (splits COMM_WORLD into one communicator per role),
2. the mailbox (duplicates COMM_WORLD for its messages),
3. each rank's GPU slot on its node (``gpu_slot``);
4. torch.distributed over the ranks that hold a model (trainers, generators, colocated ranks,
   critics), the training ranks' group and the critic ranks'; the controller and reward ranks neither join nor import
   torch, which saves each of them seconds of CPU at start-up (a reward rank that hosts a
   reward model imports it when it builds its scorer).

Knows nothing of the role map or the actors: ``launch/job.py`` calls it, then builds the actor.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpi4py import MPI

from runtime import Mailbox, RoleTable


@dataclass
class Distributed:
    """What every rank holds once the collective set-up is done."""

    role_table: RoleTable
    mailbox: Mailbox
    train_group: object  # torch process group of the training ranks (None if just one)
    liveness_comm: MPI.Comm  # heartbeats to the controller (runtime.liveness), apart from the mailbox
    model_comm: MPI.Comm | None = None  # the ranks that hold a model (the torch world); None elsewhere
    critic_group: object = None  # torch process group of the critic ranks (None if at most one)
    # This rank's GPU among its node's, when it takes one: the model ranks take the first ones
    # in rank order (transports.torch_dist), the reward ranks those after (a reward model).
    gpu_slot: int = 0


# The roles whose ranks hold a model: they alone import torch and join torch.distributed.
MODEL_ROLES = ("trainer", "generator", "colocated", "critic")


def setup_distributed(
    comm: MPI.Comm, roles_by_rank: list[str], train_role: str, train_device: str = "cpu"
) -> Distributed:
    """Steps 1-4 above. Collective over ``comm``: every rank calls it, in this order.
    ``train_device``: ``world.trainer.device`` (the trainers' group backend follows it)."""
    table = RoleTable(comm, roles_by_rank)
    mailbox = Mailbox(table)
    liveness_comm = comm.Dup()
    holds_model = table.role in MODEL_ROLES
    slot = gpu_slot(comm, table.role)
    # Ranks of model_comm follow those of comm (key), so torch rank i is the i-th model rank.
    model_comm = comm.Split(0 if holds_model else MPI.UNDEFINED, key=comm.Get_rank())
    if not holds_model:
        return Distributed(table, mailbox, None, liveness_comm, gpu_slot=slot)
    import torch

    from transports.torch_dist import init_torch_distributed, new_group

    init_torch_distributed(model_comm)
    model_ranks = [r for r, role in enumerate(roles_by_rank) if role in MODEL_ROLES]
    train_ranks = [model_ranks.index(r) for r in table.ranks(train_role)]
    critic_ranks = [model_ranks.index(r) for r in table.ranks("critic")]
    # new_group is collective over the whole torch world, members or not.
    backend = train_group_backend(train_device, torch.cuda.is_available()) if train_role == "trainer" else None
    group = new_group(train_ranks, backend=backend) if len(train_ranks) > 1 else None
    critics = new_group(critic_ranks) if len(critic_ranks) > 1 else None
    train_group = group if table.role == train_role else None
    critic_group = critics if table.role == "critic" else None
    return Distributed(table, mailbox, train_group, liveness_comm, model_comm, critic_group, gpu_slot=slot)


def gpu_slot(comm: MPI.Comm, role: str) -> int:
    """This rank's place in its node's GPU order: model ranks first, in rank order (as
    ``init_torch_distributed`` sets their devices), then reward ranks. Collective over ``comm``."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    roles = node.allgather(role)
    me = node.Get_rank()
    node.Free()
    return node_slot(roles, me)


def node_slot(roles: list[str], me: int) -> int:
    """The GPU slot of the ``me``-th rank of a node whose ranks (in rank order) play ``roles``
    (``gpu_slot`` without the communicator; the launch's device check reckons with it too)."""
    models = [i for i, r in enumerate(roles) if r in MODEL_ROLES]
    if roles[me] in MODEL_ROLES:
        return models.index(me)
    return len(models) + sum(1 for r in roles[:me] if r == "reward")


# The trainers' group on CUDA: NCCL for CUDA tensors (FSDP2's all-gathers and reduce-scatters),
# gloo beside it for the CPU ones (the step's scalars, DCP's plans, roles/trainer_group.py).
CUDA_TRAIN_BACKEND = "cpu:gloo,cuda:nccl"


def train_group_backend(device: str, cuda_available: bool) -> str | None:
    """The backend of the trainers' torch group for ``world.trainer.device``: None (the torch
    world's own: gloo on a CPU host) for trainers on the CPU, :data:`CUDA_TRAIN_BACKEND` on CUDA."""
    from roles.policy.placement import wants_cuda

    return CUDA_TRAIN_BACKEND if wants_cuda(device, cuda_available) else None
