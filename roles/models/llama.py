"""Llama (``LlamaForCausalLM``): decoder blocks at ``model.layers``, Megatron tensor parallelism.

Knows the Hugging Face parameter names of a Llama and how tensor parallelism splits them. Does
not know the sizes (they come from the checkpoint) nor anything about attention or RoPE.
"""

from __future__ import annotations

from roles.models.base import ModelSpec


def llama_tp_dim(name: str, ndim: int) -> int | None:
    """Megatron-style split of a Hugging Face Llama parameter: dim to slice, or None (replicate)."""
    if ndim == 2 and name.endswith(("o_proj.weight", "down_proj.weight")):
        return 1  # row-parallel: input features are split
    if name.endswith(
        (
            "q_proj.weight",
            "k_proj.weight",
            "v_proj.weight",
            "gate_proj.weight",
            "up_proj.weight",
            "q_proj.bias",
            "k_proj.bias",
            "v_proj.bias",
            "embed_tokens.weight",
            "lm_head.weight",
        )
    ):
        return 0  # column-parallel (and vocab-parallel embedding / head)
    return None  # norms: every rank holds them whole


SPEC = ModelSpec(name="llama", architectures=("LlamaForCausalLM",), tp_rule=llama_tp_dim)
