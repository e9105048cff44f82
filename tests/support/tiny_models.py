"""A tiny randomly initialised Llama (37 ids, 2 layers) for the trainers' MPI parity tests."""

from __future__ import annotations

import torch


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=37,
        hidden_size=24,
        intermediate_size=45,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)
