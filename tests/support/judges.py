"""Tiny judge models for the tests whose greedy verdict is known, built in a second.

``build_lookup_judge`` crafts a one-layer ``LlamaForCausalLM`` over a character tokenizer
whose next token depends only on the last one, through a table the test writes: each token's
embedding is its own basis vector, attention and MLP add nothing (their output projections
are zero), so the final norm sees the last token alone and the output head maps it to the
table's next character. So a judge that answers "7" to anything, one that never stops, or
one that reads the response's last digit, run through the real engines (weights in
safetensors, loaded as any checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from examples.toy.tiny_llama import EOS, SPECIAL_TOKENS, build_tiny_llama

HIDDEN = 128  # room for one basis vector per token: the alphabet and specials must fit


def build_lookup_judge(out: Path, alphabet: str, next_char: Callable[[str], str | None], *, context: int = 128) -> Path:
    """A judge in ``out`` that, after a token whose text is ``c`` (``""`` for a special
    token), writes ``next_char(c)``, or ends (EOS) where that is None."""
    if len(SPECIAL_TOKENS) + len(alphabet) > HIDDEN:
        raise ValueError(f"at most {HIDDEN - len(SPECIAL_TOKENS)} characters, got {len(alphabet)}")
    size = dict(hidden_size=HIDDEN, num_layers=1, num_heads=2, intermediate_size=64)
    build_tiny_llama(out, alphabet, max_position_embeddings=context, **size)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    model = LlamaForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    vocab = len(tokenizer)
    head = torch.zeros(vocab, HIDDEN)
    for i in range(vocab):
        text = "" if i < len(SPECIAL_TOKENS) else tokenizer.convert_ids_to_tokens(i)
        following = next_char(text)
        j = tokenizer.convert_tokens_to_ids(EOS if following is None else following)
        head[j, i] = 10.0
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(vocab, HIDDEN))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        model.lm_head.weight.copy_(head)
    model.save_pretrained(str(out), safe_serialization=True)
    return out
