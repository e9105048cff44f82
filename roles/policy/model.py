"""The policy as a training rank holds it: loaded from ``model.path``, sharded over the trainers.

- one trainer: the whole model (it owns every row of the weight sync's plan);
- several trainers: FSDP2 shards over the trainers' group, each pushing only its rows;
- colocated ranks: full replicas (gradients all-reduced), no weight transfer at all.

Knows nothing of messages or generators; ``roles.policy.weight_transport`` builds the transport from
:meth:`Policy.local_params`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from roles.policy.sharding import full_state, local_shards, shard_model


@dataclass
class Policy:
    """The trained model as a training rank holds it (whole, or its FSDP2 shard)."""

    model: torch.nn.Module
    tokenizer_dir: str
    sharded: bool
    # The frozen starting weights, sharded like ``model``: GRPO's KL anchor (kl_coef > 0 only).
    reference: torch.nn.Module | None = None
    lora: object = None  # model.lora (a LoraConfig): the model carries adapters on a frozen base
    # Where the weight sync sends from (roles.policy.weight_transport.send_device): the model's
    # own device, or the CPU for a trainer on CUDA whose generators receive into host memory.
    send_device: str = "cpu"
    _staged: list = field(default_factory=list, repr=False)  # the last CPU copies, alive while sent

    def local_params(self):
        """What this rank sends in a weight sync: its rows of every parameter (no copy); with
        LoRA, of the adapters only (the generators hold the same frozen base). A CUDA model
        sending from the CPU hands fresh host copies (one device-to-host copy a push)."""
        shards = local_shards(self.model)
        if self.lora is not None:
            from roles.models.lora import is_adapter

            shards = [s for s in shards if is_adapter(s.name)]
        if all(s.tensor.device.type == self.send_device for s in shards):
            return shards
        self._staged = [s._replace(tensor=s.tensor.to(self.send_device)) for s in shards]
        return self._staged

    def save(self, out_dir: str | Path, is_leader: bool) -> None:
        """Write a Hugging Face folder. Collective over the trainers when sharded.

        Written by hand rather than with ``save_pretrained``, which under torch.distributed
        writes only on torch rank 0 (here the first generator, or a colocated rank other than the leader).
        """
        from safetensors.torch import save_file
        from transformers import AutoTokenizer

        state = full_state(self.model) if self.sharded else None
        if not is_leader:
            return
        if state is None:
            state = {n: p.detach() for n, p in self.model.named_parameters()}
        if self.lora is not None:  # a plain Hugging Face folder: the adapters merged into the base
            from roles.models.lora import merged_state

            state = merged_state(state, self.lora)
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        save_file(
            # .cpu(): a trainer on CUDA writes from host memory (a CPU tensor is returned as it is)
            {n: t.contiguous().cpu() for n, t in state.items()},
            str(out / "model.safetensors"),
            metadata={"format": "pt"},
        )
        self.model.config.save_pretrained(out)
        if getattr(self.model, "generation_config", None) is not None:
            self.model.generation_config.save_pretrained(out)
        AutoTokenizer.from_pretrained(self.tokenizer_dir).save_pretrained(out)


def load_model(model) -> torch.nn.Module:
    """The Hugging Face causal LM of a ``ModelConfig``, in its dtype, without dropout."""
    from roles.models.loading import load_complete

    return disable_dropout(load_complete(model.path, model.torch_dtype()))


def disable_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Set every dropout probability in ``model`` to 0, so its train mode computes what its eval
    mode does; returns ``model``. Its config (and so an exported model) is left as it was.

    The trainer's log-probs must be the generator's policy's: the importance ratio and AIPO's
    clip compare the two, and the generator samples without dropout. With GPT-2's and OPT's
    default 0.1, dropout alone put the on-policy ratio at up to 1.19 before any update. Gradient
    checkpointing needs train mode, so the modules' probabilities go, not the mode: nn.Dropout
    modules, and the float attributes that Hugging Face attention and decoder layers read in
    train mode (``attention_dropout``, ``dropout``, ``layerdrop``, ``resid_pdrop``, ...).
    """
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if "drop" in name and type(value) is float:
                setattr(module, name, 0.0)
    return model


def load_policy(model, group, *, shard: bool, reference: bool, device=None) -> Policy:
    """Load the policy (and, with ``reference``, its frozen copy) onto ``device`` (None: the
    CPU, where it loads) and shard both over ``group``.

    Collective over ``group`` when ``shard`` (FSDP2 keeps each rank's rows of what it loaded).
    """
    policy = load_model(model)
    if model.lora is not None:
        from roles.models.lora import inject_lora

        policy = inject_lora(policy, model.lora)
    # With LoRA the reference is the policy's own frozen base, its adapters switched off.
    frozen = load_model(model).requires_grad_(False).eval() if reference and model.lora is None else None
    if device is not None and torch.device(device).type != "cpu":
        policy = policy.to(device)
        frozen = frozen.to(device) if frozen is not None else None
    if shard:
        policy = shard_model(policy, group)
        if frozen is not None:
            frozen = shard_model(frozen, group)
    if reference and model.lora is not None:
        from roles.models.lora import BaseView

        frozen = BaseView(policy)
    return Policy(policy, model.path, shard, frozen, lora=model.lora)
