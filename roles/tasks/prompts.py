"""Prompts to token ids: the chat template, the system prompt, and the length limit.

Done once per example when a run starts (the controller keeps the ids), never per step.
With a tokenizer that has a chat template (and ``task.chat_template`` on), a prompt becomes
``[system?, user]`` messages, or the example's own messages, rendered with
``add_generation_prompt=True``; without one, the text is encoded as is (special tokens such
as BOS added as the tokenizer does for plain text). Prompts longer than the limit are left
out and counted, never truncated: a cut prompt would train the policy on a question nobody
asked. Knows nothing about tasks beyond ``Example`` and ``TaskConfig``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from roles.tasks.base import Example, TaskConfig, TaskDataError


@dataclass
class EncodedPrompts:
    ids: dict[int, np.ndarray]  # example id -> int32 prompt token ids, in the examples' order
    too_long: list[int] = field(default_factory=list)  # example ids left out for length
    longest: int = 0  # tokens in the longest prompt kept


def uses_chat_template(tokenizer, config: TaskConfig) -> bool:
    return bool(config.chat_template and getattr(tokenizer, "chat_template", None))


def messages_of(example: Example, config: TaskConfig) -> list[dict[str, str]]:
    """The chat messages of an example's prompt, with the configured system prompt first."""
    if isinstance(example.prompt, str):
        messages = [{"role": "user", "content": example.prompt}]
    else:
        messages = [dict(m) for m in example.prompt]
    if config.system_prompt is not None and not any(m.get("role") == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": config.system_prompt})
    return messages


def prompt_text(tokenizer, example: Example, config: TaskConfig, tools: list[dict] | None = None) -> str:
    """The exact text the model is prompted with (the chat template applied, with ``tools``
    when an environment gives some; or plain)."""
    if uses_chat_template(tokenizer, config):
        messages = messages_of(example, config)
        try:
            return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - a template raises what its author wrote: name the example
            roles = ", ".join(str(m.get("role")) for m in messages)
            # messages_of adds at most the configured system message: one more than the example's.
            own = 1 if isinstance(example.prompt, str) else len(example.prompt)
            hint = (
                " (task.system_prompt added the system message: this template may take none)"
                if len(messages) > own
                else ""
            )
            raise TaskDataError(
                f"task: the chat template of the tokenizer at model.path refused example {example.id}'s "
                f"messages (roles: {roles}): {type(e).__name__}: {e}{hint}"
            ) from None
    if not isinstance(example.prompt, str):
        why = (
            "task.chat_template is false"
            if not config.chat_template
            else "the tokenizer at model.path has no chat template"
        )
        raise TaskDataError(f"task: example {example.id} has a chat-message prompt but {why}; plain-text prompts only")
    if config.system_prompt is not None:
        return f"{config.system_prompt}\n\n{example.prompt}"
    return example.prompt


def encode_prompts(
    tokenizer,
    examples: Sequence[Example],
    config: TaskConfig,
    max_tokens: int | None,
    batch: int = 1024,
    tools: list[dict] | None = None,
) -> EncodedPrompts:
    """Token ids of every prompt not longer than ``max_tokens`` (None: no limit); ``tools``:
    the environment's, rendered by the chat template."""
    chat = uses_chat_template(tokenizer, config)
    out = EncodedPrompts(ids={})
    for start in range(0, len(examples), batch):
        chunk = examples[start : start + batch]
        texts = [prompt_text(tokenizer, ex, config, tools) for ex in chunk]
        # The template already holds every special token; plain text gets the tokenizer's own
        # (BOS for Llama-style ones). Batched: the Rust tokenizer encodes in one call.
        encoded = _encode(tokenizer, texts, chunk, add_special_tokens=not chat)
        for ex, ids in zip(chunk, encoded):
            if max_tokens is not None and len(ids) > max_tokens:
                out.too_long.append(ex.id)
                continue
            if not ids:
                raise TaskDataError(f"task: example {ex.id} has a prompt that encodes to no tokens")
            out.ids[ex.id] = np.asarray(ids, dtype=np.int32)
            out.longest = max(out.longest, len(ids))
    return out


def _encode(tokenizer, texts: list[str], examples: Sequence[Example], add_special_tokens: bool) -> list:
    try:
        return tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]
    except Exception:  # noqa: BLE001 - find the prompt the tokenizer refuses, and name it
        for text, ex in zip(texts, examples):
            try:
                tokenizer(text, add_special_tokens=add_special_tokens)
            except Exception as e:  # noqa: BLE001
                raise TaskDataError(
                    f"task: the tokenizer at model.path cannot encode the prompt of example "
                    f"{ex.id} ({text[:60]!r}...): {type(e).__name__}: {e}"
                ) from None
        raise
