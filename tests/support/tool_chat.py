"""A tiny byte-level chat tokenizer with tool-calling templates, for the episode tests."""

from __future__ import annotations

# Qwen2.5's layout for tools and tool results, short: the tools in a system block; tool
# messages as one user turn of <tool_response> blocks.
TOOLS_TEMPLATE = (
    "{%- if tools %}{{ '<|im_start|>system\\nTools: ' }}{% for t in tools %}{{ t.function.name + ' ' }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{%- endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)

# A thinking model's template: earlier assistant turns lose their <think>...</think> part.
STRIPPING_TEMPLATE = TOOLS_TEMPLATE.replace(
    "{%- else %}{{ '<|im_start|>' + m.role",
    "{%- elif m.role == 'assistant' and not loop.last %}"
    "{{ '<|im_start|>assistant\\n' + m.content.split('</think>')[-1].lstrip() + '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role",
)

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates arithmetic.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}


def tool_chat_tokenizer(out_dir, template: str = TOOLS_TEMPLATE):
    """A byte-level BPE chat tokenizer (``<|im_end|>`` its EOS) with ``template``."""
    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer

    texts = ["What is 12+30?", "<tool_call>", "</tool_call>", "<tool_response>", "<think>", "calculator", "42"] * 20
    tok = save_bpe_chat_tokenizer(out_dir, texts, vocab_size=400)
    tok.chat_template = template
    return tok
