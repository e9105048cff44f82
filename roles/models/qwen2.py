"""Qwen2 (``Qwen2ForCausalLM``): a Llama with biases on the q/k/v projections.

Its parameters carry Llama's names plus ``q_proj.bias``, ``k_proj.bias`` and ``v_proj.bias``,
which Llama's rule already splits with their weights (column-parallel), so the tensor-parallel
split is Llama's. Whether the head is tied comes from each checkpoint's config (the small
Qwen2 models tie it), not from the family.
"""

from __future__ import annotations

from roles.models.base import ModelSpec
from roles.models.llama import llama_tp_dim

SPEC = ModelSpec(name="qwen2", architectures=("Qwen2ForCausalLM",), tp_rule=llama_tp_dim)
