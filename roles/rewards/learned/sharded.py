"""One reward model sharded across the reward ranks (FSDP2, forward only), and the lockstep
that sharing it needs.

Each reward rank scores its own groups, but every forward pass all-gathers each layer from
all of them: the reward ranks must run the same number of forward passes, at the same time.
So when the model is sharded the ranks agree, once per turn of their loops, whether any of
them has groups to score (``RewardScoring.agree``); if one has, all score together, a rank without work
running a one-token placeholder row for each micro-batch the busiest rank has. A rank that is
stopping keeps taking part until every rank is stopping (``roles.reward``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from roles.models import spec_for


def reward_ranks_group(role_comm):
    """The reward ranks' own torch world (they are not in the model ranks' one): collective
    over ``role_comm``, the reward role's communicator."""
    from transports.torch_dist import init_torch_distributed

    init_torch_distributed(role_comm)
    return dist.group.WORLD


def shard_for_scoring(model: torch.nn.Module, group, device: torch.device) -> None:
    """Shard ``model`` in place over ``group``: each decoder layer its own FSDP2 unit (gathered
    just before it runs, freed after), the root the rest (embeddings, norm, score head)."""
    model.to(device)
    mesh = DeviceMesh.from_group(group, device.type)
    for layer in spec_for(model).decoder_layers(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
