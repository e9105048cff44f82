"""The policy on the training ranks and the weight path to the generators, set up in one place.

Collective: every rank of the job calls :meth:`WeightPath.build` (the torch process groups
and the transfer-plan exchange involve all of them); controller and reward ranks come out
with nothing to do.

- one trainer: the whole model, pushed through the same plan (it owns every row);
- several trainers: FSDP2 shards over the trainers' group, each pushing only its rows;
- colocated ranks: full replicas (gradients all-reduced), no weight transfer at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from roles.sharding import full_state, local_shards, shard_model
from transports.torch_dist import init_torch_distributed, new_group
from transports.weights import Need, make_weight_transport

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def last_pushed_version(steps: int, final_eval: bool = False) -> int:
    """The newest weight version trainers push in a run of ``steps`` steps.

    Version v is the policy after v optimizer steps; it is pushed after every step but the
    last (nobody samples after it), so generators receive versions 1 .. steps - 1. A run that
    evaluates during training also evaluates its final policy on the generators: then the
    last version is pushed too.
    """
    return steps if final_eval else max(steps - 1, 0)


@dataclass
class Policy:
    """The trained model as a training rank holds it (whole, or its FSDP2 shard)."""

    model: torch.nn.Module
    tokenizer_dir: str
    sharded: bool
    # The frozen starting weights, sharded like ``model``: GRPO's KL anchor (kl_coef > 0 only).
    reference: torch.nn.Module | None = None

    def local_params(self):
        """What this rank sends in a weight sync: its rows of every parameter (no copy)."""
        return local_shards(self.model)

    def named_full_params(self):
        """Whole parameters by Hugging Face name (replicas only; for a local engine reload)."""
        return [(n, p.detach()) for n, p in self.model.named_parameters()]

    def save(self, out_dir: str | Path, is_leader: bool) -> None:
        """Write a Hugging Face folder. Collective over the trainers when sharded.

        Written by hand rather than with ``save_pretrained``, which under torch.distributed
        writes only on torch rank 0 (here the controller, which holds no model).
        """
        from safetensors.torch import save_file
        from transformers import AutoTokenizer

        state = full_state(self.model) if self.sharded else None
        if not is_leader:
            return
        if state is None:
            state = {n: p.detach() for n, p in self.model.named_parameters()}
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        save_file({n: t.contiguous() for n, t in state.items()}, str(out / "model.safetensors"),
                  metadata={"format": "pt"})
        self.model.config.save_pretrained(out)
        if getattr(self.model, "generation_config", None) is not None:
            self.model.generation_config.save_pretrained(out)
        AutoTokenizer.from_pretrained(self.tokenizer_dir).save_pretrained(out)


def load_model(cfg) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=DTYPES[cfg.model.dtype])


@dataclass
class WeightPath:
    policy: Policy | None  # on training ranks
    trainer_group: object  # torch process group of the training ranks (None if just one)
    transport: object  # WeightSender on trainers, WeightReceiver on generators, else None

    @classmethod
    def build(cls, cfg, mesh) -> "WeightPath":
        init_torch_distributed(mesh.comm)
        train_role = cfg.world.train_role
        train_ranks = mesh.ranks(train_role)
        # new_group is collective over the whole torch world, members or not.
        group = new_group(train_ranks) if len(train_ranks) > 1 else None
        trains = mesh.role == train_role
        policy = None
        if trains:
            sharded = mesh.role == "trainer" and group is not None
            model = load_model(cfg)
            reference = load_model(cfg).requires_grad_(False).eval() if cfg.algorithm.kl_coef else None
            if sharded:
                model = shard_model(model, group)
                if reference is not None:
                    reference = shard_model(reference, group)
            policy = Policy(model, cfg.model.path, sharded, reference)
        # The plan exchange is collective over the job; only trainers and generators take part.
        shards = policy.local_params() if (policy is not None and mesh.role == "trainer") else None
        need = Need() if mesh.role == "generator" else None
        # copy=False: trainers send straight from the parameters' memory (a copy costs about
        # as much as the transfer on CPU: bench/weight_sync.py direct_s vs direct_copy_s); the
        # trainer makes optimizer.step() wait for the sends in flight (WeightSender.guard).
        transport = make_weight_transport(
            cfg.weights.transport, mesh.comm, shards=shards, need=need,
            bucket_bytes=cfg.weights.bucket_mb * 1024 * 1024, copy=False,
        )
        return cls(policy, group if trains else None, transport)
