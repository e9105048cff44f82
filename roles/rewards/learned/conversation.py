"""A prompt and its response as a learned scorer's own tokenizer reads them.

The response was decoded with the policy's tokenizer; here the whole exchange is rendered
again with the scorer's chat template (``[prompt messages..., assistant: response]``), so a
reward model of another family than the policy reads the conversation the way it was
trained to. A scorer tokenizer without a chat template (or with ``chat_template: false``)
reads the prompt messages' contents, one per line, followed directly by the response.
"""

from __future__ import annotations

from roles.rewards.learned.base import ScoreItem


def uses_template(tokenizer, wanted: bool) -> bool:
    return bool(wanted and getattr(tokenizer, "chat_template", None))


def conversation_text(tokenizer, item: ScoreItem, use_template: bool) -> str:
    if use_template:
        turns = [*item.messages, {"role": "assistant", "content": item.response}]
        return tokenizer.apply_chat_template(turns, tokenize=False)
    return "\n".join(str(m.get("content", "")) for m in item.messages) + item.response


def encode(tokenizer, texts: list[str], use_template: bool, max_length: int) -> tuple[list[list[int]], list[bool]]:
    """Token ids of each text, and whether each was cut: over-long ones keep their last
    ``max_length`` tokens (a reward model reads its score at the end of the response).
    A rendered template already holds its special tokens (BOS), so none are added to it."""
    if not texts:  # tokenizers refuse an empty batch
        return [], []
    ids = tokenizer(texts, add_special_tokens=not use_template)["input_ids"]
    return [list(x[-max_length:]) for x in ids], [len(x) > max_length for x in ids]
