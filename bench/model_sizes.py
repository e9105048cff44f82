"""The synthetic Llama shapes the weight benchmarks share (bench/weight_sync.py, bench/lora.py, bench/vllm_lora.py).

name -> (hidden, layers, intermediate, vocab): Llama shapes, MHA, untied head.
"""

SIZES = {"25M": (256, 10, 688, 32000), "100M": (768, 7, 2048, 32000), "400M": (1024, 26, 2816, 32000)}


def llama_config(size: str):
    """The ``LlamaConfig`` of ``size``: heads of 64, the same number of key-value heads."""
    from transformers import LlamaConfig

    hidden, layers, inter, vocab = SIZES[size]
    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=max(hidden // 64, 1), num_key_value_heads=max(hidden // 64, 1),
        max_position_embeddings=2048, tie_word_embeddings=False,
    )  # fmt: skip
