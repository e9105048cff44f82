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

# CHAT_TEMPLATE with Qwen2.5's tool calling, shortened for a tiny model: with ``tools=``, one
# system block lists their JSON specs (after the caller's system message, if any) and shows the
# call format; role "tool" messages become <tool_response> blocks inside one user turn per run
# of them; an assistant message's ``tool_calls`` are written as <tool_call> blocks. Without
# tools and tool messages it renders exactly as CHAT_TEMPLATE.
TOOLS_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}"
    # Each tool's function spec alone (name, description, parameters), without the wrapper
    # {"type": "function", "function": ...}: ten tokens fewer per tool for a tiny model.
    "{%- for tool in tools %}{%- if tool['function'] is defined %}{%- set tool = tool['function'] %}{%- endif %}"
    "{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    '{{- \'\\n</tools>\\nCall one as <tool_call>\\n{"name": <name>, "arguments": <args>}\\n</tool_call>'
    "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- if call['function'] is defined %}{%- set call = call['function'] %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' }}"
    "{%- if call['arguments'] is string %}{{- call['arguments'] }}"
    "{%- else %}{{- call['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Tool markup as Qwen2.5 has it: added tokens, each one id, but not special (decoding with
# skip_special_tokens keeps them, so a turn's text still shows its call).
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

# The role names the template writes between its special tokens. They occur in every
# conversation, so a real chat tokenizer has each as one token; the trainer sees them as often
# as the texts so that this one does too.
CHAT_ROLES = ("system", "user", "assistant")

# The smallest vocabulary with room for merges: 256 byte symbols plus the special tokens.
MIN_VOCAB = 256 + len(SPECIAL_TOKENS)


def save_bpe_chat_tokenizer(
    out_dir: str | Path, texts: Iterable[str], vocab_size: int = 1024, tools: bool = False
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of at most ``vocab_size`` ids on ``texts``, save it in ``out_dir``.

    ``texts`` are what the model will read and write (questions, instructions, answers), as
    plain strings without chat markup: the template's roles are added here.

    The folder holds ``tokenizer.json`` and ``tokenizer_config.json`` (special tokens and the
    chat template, where Qwen2.5 keeps them), which ``AutoTokenizer.from_pretrained`` loads
    offline. The vocabulary is smaller than ``vocab_size`` when the texts run out of pairs to
    merge (the trainer stops there).

    ``tools``: the template is ``TOOLS_CHAT_TEMPLATE`` (it renders ``tools=`` and role "tool"
    messages) and ``TOOL_TOKENS`` are added tokens, counted in ``vocab_size``; ``texts`` should
    then hold what the tool blocks say too (the specs, the calls, the results).
    """
    added = TOOL_TOKENS if tools else ()
    if vocab_size < MIN_VOCAB + len(added):
        raise ValueError(
            f"vocab_size must be at least {MIN_VOCAB + len(added)} (bytes + special tokens"
            f"{' + tool tokens' if tools else ''}), got {vocab_size}"
        )
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
        vocab_size=vocab_size - len(added),
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
        chat_template=TOOLS_CHAT_TEMPLATE if tools else CHAT_TEMPLATE,
        padding_side="left",  # prompts are batched for generation, which pads on the left
    )
    fast.add_tokens(list(added))  # after the trained ids: non-special, as Qwen2.5's are
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
