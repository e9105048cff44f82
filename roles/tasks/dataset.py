"""Any prompt set in local files: a prompt column, an optional reference, chosen metadata.

The prompt column holds plain text, or chat messages: a list of ``{role, content}``
mappings (roles system, user, assistant; other keys are dropped), rendered later with the
tokenizer's chat template. ``answer_key`` names the reference answers (none: every answer
is ""), ``metadata_keys`` the columns copied into each example's metadata for the reward.
This task has no default reward: the role map names one. The task's ``system_prompt`` is
applied when prompts are rendered, not here. Reading files, ids and splits are
:mod:`roles.tasks.file_task`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.tasks.base import Example, Messages
from roles.tasks.file_task import BadRow, FileTask, FileTaskConfig, check_text, describe, text_cell

ROLES = ("system", "user", "assistant")


class DatasetConfig(FileTaskConfig):
    name: str = "dataset"
    prompt_key: str = "prompt"  # the column of prompts: text, or a list of chat messages
    # The column of reference answers (text or numbers), passed to the reward as
    # example.answer. None: the prompts have no reference (the reward must not need one).
    answer_key: str | None = None
    metadata_keys: list[str] = []  # columns copied into example.metadata, for the reward


class DatasetTask(FileTask):
    Config = DatasetConfig
    config: DatasetConfig
    default_reward = None

    def columns_for(self) -> tuple[list[str], list[str]]:
        c = self.config
        answer = [c.answer_key] if c.answer_key is not None else []
        return [c.prompt_key, *answer, *c.metadata_keys], []

    def make_example(self, example_id: int, row: Mapping[str, Any]) -> Example | str:
        c = self.config
        value = row.get(c.prompt_key)
        if isinstance(value, (list, tuple)):
            prompt: str | Messages | None = _messages(value, c.prompt_key)
        elif value is None or isinstance(value, str):
            prompt = text_cell(row, c.prompt_key)
        else:
            raise BadRow(f"{c.prompt_key!r} is {describe(value)}, expected a string or a list of chat messages")
        if prompt is None:
            return f"an empty {c.prompt_key!r}"
        answer = ""
        if c.answer_key is not None:
            answer = text_cell(row, c.answer_key, numbers=True)
            if answer is None:
                return f"an empty {c.answer_key!r}"
        return Example(example_id, prompt, answer, {k: row.get(k) for k in c.metadata_keys})


def _messages(value: list | tuple, key: str) -> Messages | None:
    """Validated chat messages (only role and content kept); None when the user says nothing."""
    if not value:
        return None  # as unusable as an empty text prompt
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, Mapping):
            raise BadRow(f"{key!r} message {i} is a {type(m).__name__}, expected a {{role, content}} mapping")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise BadRow(f"{key!r} message {i} has role {role!r} (roles: {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise BadRow(f"{key!r} message {i} ({role}) has content {content!r:.40}, expected a string")
        check_text(content, f"{key!r} message {i} ({role})")
        out.append({"role": role, "content": content})
    if not any(m["role"] == "user" for m in out):
        raise BadRow(f"{key!r} has no user message (roles: {', '.join(m['role'] for m in out)})")
    # Blank user turns are as empty as a blank text prompt (skipped and counted, like one),
    # whatever a system message says around them.
    if not any(m["role"] == "user" and m["content"].strip() for m in out):
        return None
    return tuple(out)
