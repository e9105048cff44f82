"""Tiny Llama models, built locally so tests and demos never touch a hub.

``build_tiny_llama`` makes one with its own character tokenizer (the arithmetic demo);
``build_tiny_llama_for_tokenizer`` one over a tokenizer the caller made (e.g. the byte-level
BPE chat tokenizer of ``examples.toy.tiny_bpe``). Weights are random: training is elsewhere.

The model is a real ``LlamaForCausalLM`` saved as Hugging Face files (config.json,
model.safetensors, tokenizer.json), so every consumer — the torch engine, vLLM, the
trainer — loads it through the same ``from_pretrained`` path it would use for a real
checkpoint.

Head dimension: ``hidden_size / num_heads`` must be 32 or 64. vLLM's CPU attention kernels
are compiled for a fixed set of standard head sizes, and an odd one (e.g. 48) fails there
even though plain PyTorch runs it. Both builders refuse anything else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, BOS, EOS)  # ids 0, 1, 2, in this order
SUPPORTED_HEAD_DIMS = (32, 64)  # what vLLM's CPU attention kernels accept


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int  # residual width; hidden_size / num_heads must be in SUPPORTED_HEAD_DIMS
    num_layers: int  # decoder blocks
    num_heads: int  # attention heads (no grouped-query attention: kv heads = heads)
    intermediate_size: int  # SwiGLU inner width
    max_position_embeddings: int  # longest prompt + response the model is configured for

    def kwargs(self) -> dict:
        """Keyword arguments for ``build_tiny_llama`` or ``build_tiny_llama_for_tokenizer``."""
        return asdict(self)


# ~0.66M parameters: the arithmetic demo; SFT + RL run in seconds to minutes on 2 CPU cores.
TINY = ModelSize(hidden_size=128, num_layers=4, num_heads=2, intermediate_size=256, max_position_embeddings=64)
# ~25M parameters: big enough that generation is bound by matmuls, not Python overhead,
# so engine benchmarks (torch vs HF generate vs vLLM) measure something real.
BENCH_25M = ModelSize(hidden_size=512, num_layers=8, num_heads=8, intermediate_size=1376, max_position_embeddings=256)


def save_char_tokenizer(out_dir: str | Path, alphabet: str) -> PreTrainedTokenizerFast:
    """Write a fast character-level tokenizer for ``alphabet`` to ``out_dir`` and return it.

    Ids: ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, then the alphabet in order. Encoding prepends
    ``<bos>`` (like Llama tokenizers), decoding concatenates characters with no separator.
    """
    chars = list(dict.fromkeys(alphabet))  # keep order, drop duplicates
    if len(chars) != len(alphabet) or any(len(c) != 1 for c in chars):
        raise ValueError(f"alphabet must be distinct single characters, got {alphabet!r}")
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *chars])}
    # WordLevel + split-every-character is the simplest model that maps one char to one id.
    # The unk token is deliberately absent from the vocabulary: a character outside the
    # alphabet then fails to encode ("Missing [UNK] token") instead of becoming a silent id.
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # WordLevel's default decoder would join with spaces
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS, padding_side="left"
    )
    fast.save_pretrained(str(out_dir))
    return fast


def build_tiny_llama(
    out_dir: str | Path,
    alphabet: str,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 64,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Save a randomly initialised ``LlamaForCausalLM`` plus its character tokenizer in ``out_dir``."""
    _check_head_dim(hidden_size, num_heads)  # before writing anything
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = save_char_tokenizer(out, alphabet)
    config = llama_config(tok, hidden_size, num_layers, num_heads, intermediate_size, max_position_embeddings)
    _save_random_model(out, config, tok, seed, dtype)
    return out


def build_tiny_llama_for_tokenizer(
    out_dir: str | Path,
    tokenizer,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 64,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Save a randomly initialised ``LlamaForCausalLM`` over a ready ``tokenizer`` in ``out_dir``.

    The tokenizer (e.g. ``examples.toy.tiny_bpe``'s chat tokenizer) is saved beside the model.
    Its own EOS, pad and BOS become the model's (BOS may be None, as for Qwen). A chat
    tokenizer's EOS ends a turn; when its pad token is a different special token (Qwen's
    ``<|endoftext|>``, which ends a document), generation stops at either, as Qwen2.5-Instruct's
    ``generation_config.json`` does.
    """
    _check_head_dim(hidden_size, num_heads)  # before writing anything
    if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer needs an EOS and a pad token")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # A chat template stays in tokenizer_config.json, where examples.toy.tiny_bpe put it.
    tokenizer.save_pretrained(str(out), save_jinja_files=False)
    config = llama_config(tokenizer, hidden_size, num_layers, num_heads, intermediate_size, max_position_embeddings)
    stops = list(dict.fromkeys([tokenizer.eos_token_id, tokenizer.pad_token_id]))
    _save_random_model(out, config, tokenizer, seed, dtype, stops if len(stops) > 1 else None)
    return out


def _save_random_model(
    out: Path, config: LlamaConfig, tok, seed: int, dtype: torch.dtype, stop_ids: list[int] | None = None
) -> None:
    # HF init draws from the global generator: seed it, but leave the caller's state as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(dtype)
    model.generation_config.pad_token_id = tok.pad_token_id
    if stop_ids is not None:
        model.generation_config.eos_token_id = stop_ids
    model.save_pretrained(str(out), safe_serialization=True)


def llama_config(
    tokenizer,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    intermediate_size: int,
    max_position_embeddings: int,
) -> LlamaConfig:
    """The ``LlamaConfig`` of a tiny model over ``tokenizer``'s vocabulary and special ids."""
    _check_head_dim(hidden_size, num_heads)
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        # Separate input and output embeddings: weight sync then moves plain, unaliased
        # tensors, and vLLM and HF agree on the parameter list.
        tie_word_embeddings=False,
    )


def _check_head_dim(hidden_size: int, num_heads: int) -> None:
    if hidden_size % num_heads or hidden_size // num_heads not in SUPPORTED_HEAD_DIMS:
        raise ValueError(
            f"hidden_size/num_heads = {hidden_size}/{num_heads} must be one of "
            f"{SUPPORTED_HEAD_DIMS} (vLLM CPU kernels support only standard head dims)"
        )
