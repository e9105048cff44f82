"""Tiny randomly initialised Llamas for the trainers' and the weight path's tests: 37 ids (odd sizes
that do not split evenly over 2 trainers), and 17 ids for the single-process trainer tests."""

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


def small_llama(seed: int = 0):
    """17 ids, width 16: the single-process trainer tests' model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    sizes = dict(vocab_size=17, hidden_size=16, intermediate_size=32, max_position_embeddings=32)
    return LlamaForCausalLM(LlamaConfig(**sizes, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2))
