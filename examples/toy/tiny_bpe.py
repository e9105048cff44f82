"""A small byte-level BPE tokenizer with a chat template, trained locally, shaped like Qwen2.5's.

For demos and tests that must go through the real chat pipeline (template, special tokens,
multi-token words) without downloading a tokenizer. It copies what matters of Qwen2.5's
``tokenizer.json``: NFC normalisation, Qwen's split pattern (every digit is a token of its
own, so numbers keep one id per digit and arithmetic stays learnable by a tiny model),
byte-level BPE (any text encodes, nothing is unknown), no BOS, ``<|im_end|>`` as EOS and
``<|endoftext|>`` as padding, and a ChatML template. The merges are learnt from the caller's
texts with ``tokenizers``' own trainer.

It knows nothing about the model that will use it or about any task: the caller passes the
texts (those the model will read and write) and the vocabulary size.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# Ids 0, 1, 2 in this order: tests and benchmarks draw random "plain" ids above the specials.
SPECIAL_TOKENS = (PAD, IM_START, IM_END)

# Qwen2's pre-tokenizer pattern (from its tokenizer.json): contractions, letter runs with one
# leading non-letter, single digits (\p{N} with no +), punctuation runs, newlines, spaces.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2.5's ChatML template without its tool-calling branches and without the default
# system message it inserts when none is given: a prompt then holds only what the task says.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The role names the template writes between its special tokens. They occur in every
# conversation, so a real chat tokenizer has each as one token; the trainer sees them as often
# as the texts so that this one does too.
CHAT_ROLES = ("system", "user", "assistant")

# The smallest vocabulary with room for merges: 256 byte symbols plus the special tokens.
MIN_VOCAB = 256 + len(SPECIAL_TOKENS)


def save_bpe_chat_tokenizer(
    out_dir: str | Path, texts: Iterable[str], vocab_size: int = 1024
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of at most ``vocab_size`` ids on ``texts``, save it in ``out_dir``.

    ``texts`` are what the model will read and write (questions, instructions, answers), as
    plain strings without chat markup: the template's roles are added here.

    The folder holds ``tokenizer.json`` and ``tokenizer_config.json`` (special tokens and the
    chat template, where Qwen2.5 keeps them), which ``AutoTokenizer.from_pretrained`` loads
    offline. The vocabulary is smaller than ``vocab_size`` when the texts run out of pairs to
    merge (the trainer stops there).
    """
    if vocab_size < MIN_VOCAB:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB} (bytes + special tokens), got {vocab_size}")
    tok = Tokenizer(models.BPE())  # no unk token: byte-level means every text encodes
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        # Every byte is in the vocabulary even if the texts never use it, so unseen
        # characters still encode (as bytes) instead of vanishing.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_with_roles(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=IM_END,  # what a chat model emits at the end of its turn
        extra_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        padding_side="left",  # prompts are batched for generation, which pads on the left
    )
    # The template in tokenizer_config.json (not chat_template.jinja): Qwen2.5's layout, which
    # every transformers and vLLM version reads.
    fast.save_pretrained(str(out_dir), save_jinja_files=False)
    return fast


def _with_roles(texts: Iterable[str]) -> Iterable[str]:
    # The trainer does not cut special tokens out of its inputs, so the template's framing is
    # taught as its role names alone (as they are pre-tokenized in a rendered prompt), never as
    # rendered text with "<|im_start|>" in it, whose pieces would waste merges.
    for text in texts:
        yield text
        yield from CHAT_ROLES
