"""FSDP2 sharding of the policy over the trainer ranks, and its dim-0 shards for the weight sync.

Each decoder layer (as the model family's spec finds them: roles/models/) is its own FSDP2
group (all-gathered just before it runs), the root takes the rest (embeddings, final norm,
head). Parameters become DTensors sharded on dim 0 the ``torch.chunk`` way: rank r holds rows
[r*ceil(n/W), (r+1)*ceil(n/W)), the last ranks may hold fewer or none. Gradients are averaged
over the trainer group, so W trainers on W equal slices of a batch take the same step as one
trainer on the whole batch (losses averaged per rank over an equal number of tokens).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from roles.models import spec_for
from transports.weights.plan import LocalShard, chunk_range


def trainer_mesh(group: dist.ProcessGroup, device_type: str = "cpu") -> DeviceMesh:
    """A 1-d device mesh over an existing process group of the trainer ranks."""
    return DeviceMesh.from_group(group, device_type)


def shard_model(
    model: nn.Module,
    group: dist.ProcessGroup | None,
    *,
    mp_policy: MixedPrecisionPolicy | None = None,
    reshard_after_forward: bool | None = None,
) -> nn.Module:
    """Shard ``model`` in place with FSDP2 over ``group``; one trainer (or None) leaves it as is.

    Collective over ``group``. Every rank must have built the same model (same seed or same
    checkpoint): FSDP2 keeps each rank's own rows of what it finds. ``reshard_after_forward``
    None: FSDP2's default (layers free their gathered weights after forward, the root keeps
    them for backward).
    """
    if group is None or dist.get_world_size(group) == 1:
        return model
    device_type = next(model.parameters()).device.type  # cuda: a trainer placed on its GPU
    mesh = trainer_mesh(group, device_type)
    return shard_over(model, mesh, mp_policy=mp_policy, reshard_after_forward=reshard_after_forward)


def shard_over(
    model: nn.Module,
    mesh: DeviceMesh,
    *,
    mp_policy: MixedPrecisionPolicy | None = None,
    reshard_after_forward: bool | None = None,
) -> nn.Module:
    """FSDP2 over ``mesh``, each decoder layer its own group and the root the rest (what
    :func:`shard_model` does over more than one trainer; a test may shard over a mesh of one)."""
    kw = dict(mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp_policy or MixedPrecisionPolicy())
    for layer in spec_for(model).decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


def local_shards(model: nn.Module) -> list[LocalShard]:
    """(name, local rows, global shape, first row) of every parameter, in ``named_parameters`` order.

    Names are checkpoint (Hugging Face) names, what an engine's ``load_weights`` expects: the
    family's ``hf_name`` of the module name. The local tensors share memory with the parameters
    (no copy). An unsharded model gives whole tensors at row 0, so one trainer goes through the
    same weight-sync path. Call it outside a forward/backward pass (e.g. after
    ``optimizer.step()``), when FSDP2 holds only the shards.
    """
    out = []
    hf_name = spec_for(model).hf_name
    with torch.no_grad():  # to_local() then hands back the local tensor itself
        for name, p in model.named_parameters():
            name = hf_name(name)
            if isinstance(p, DTensor):
                local = p.to_local()
                out.append(LocalShard(name, local, tuple(p.shape), _row_offset(p, local)))
            else:
                out.append(LocalShard(name, p.detach(), tuple(p.shape), 0))
    return out


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter whole (all-gathered over the trainers: collective) - for tests, checkpoints.

    By checkpoint name, as :func:`local_shards` names them.
    """
    out = {}
    hf_name = spec_for(model).hf_name
    for name, p in model.named_parameters():
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out[hf_name(name)] = t.detach().clone()
    return out


def _row_offset(p: DTensor, local: torch.Tensor) -> int:
    placements = p.placements
    if len(placements) != 1 or not placements[0].is_shard(0):
        if all(pl.is_replicate() for pl in placements):
            return 0  # replicated: every rank holds all rows
        raise ValueError(f"only dim-0 sharding on a 1-d mesh is supported, got {placements}")
    mesh = p.device_mesh
    start, stop = chunk_range(p.shape[0], mesh.size(), mesh.get_local_rank())
    if local.shape[0] != stop - start:
        raise RuntimeError(
            f"FSDP2 shard of {tuple(p.shape)} has {local.shape[0]} rows on mesh "
            f"rank {mesh.get_local_rank()}, expected rows [{start}, {stop})"
        )
    return start
