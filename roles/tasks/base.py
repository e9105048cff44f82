"""The Task interface: a deterministic, seedable source of examples in two splits.

A task owns its data and its reference answers. Every rank that needs it (the controller
for prompts, reward ranks for answers) builds the same task from the role map's ``task``
section and the run seed, and finds an example by its id: messages carry example ids,
never answers. A task knows nothing about tokenizers, generation or training; turning a
prompt into token ids is ``roles.tasks.prompts``.

To add a task: subclass :class:`Task` (with a nested ``Config`` if it has options) in one
module, and register it in ``roles.tasks.TASKS`` — or name it ``package.module:Class`` in
the role map without touching mpirl at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field

from roles.sections.base import Section

Split = Literal["train", "eval"]
SPLITS: tuple[Split, ...] = ("train", "eval")

# A chat prompt: [{"role": "system" | "user" | "assistant", "content": "..."}, ...]
Messages = tuple[Mapping[str, str], ...]


class TaskDataError(ValueError):
    """A data file or its contents cannot make a task (missing, unreadable, a column absent,
    no usable rows); the message names the file and the field. Raised before any work."""


@dataclass(frozen=True)
class Example:
    id: int  # stable for the same files and config, unique across both splits
    prompt: str | Messages  # plain text, or chat messages rendered with the chat template
    answer: str  # the reference answer a reward compares with ("" when there is none)
    metadata: Mapping[str, Any] = field(default_factory=dict)  # free per-row data for rewards


class TaskConfig(Section):
    """Options every task has: how its prompts become token ids."""

    # A built-in task (roles.tasks.TASKS) or "package.module:Class". The role map must name it;
    # a task's own Config defaults it to the task's name, for code that builds one directly.
    name: str = ""
    # Render prompts with the tokenizer's chat template (add_generation_prompt=True) when it
    # has one; false: the prompt text is encoded as is. Chat-message prompts need a template.
    chat_template: bool = True
    system_prompt: str | None = None  # prepended as a system message (or a line of text)
    # Prompts longer than this (in tokens, after rendering) are left out and counted at start,
    # never truncated. None: the model's context less the longest response (rollout.max_new_tokens,
    # or eval.max_new_tokens when that is larger: RoleMap.prompt_token_limit).
    max_prompt_tokens: int | None = Field(None, gt=0)


class Task:
    """Base class of tasks. Subclasses fill both splits in ``__init__`` (or override ``examples``)."""

    Config: ClassVar[type[TaskConfig]] = TaskConfig
    # The reward used when the role map names none (a name in roles.rewards.REWARDS).
    default_reward: ClassVar[str | None] = None

    def __init__(self, config: TaskConfig, seed: int = 0):
        self.config = config
        self.seed = seed
        self._splits: dict[str, Sequence[Example]] = {"train": (), "eval": ()}
        self._by_id: dict[int, Example] | None = None

    def examples(self, split: Split) -> Sequence[Example]:
        """The examples of ``split``, in a fixed order (the controller shuffles per epoch)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r} (splits: {', '.join(SPLITS)})")
        return self._splits[split]

    def check_ids(self) -> None:
        """Index both splits by id now (``example`` would at its first call): a ``ValueError``
        naming the ids that repeat, so a preflight can refuse them before any work."""
        self._by_id = self._index_by_id()

    def _index_by_id(self) -> dict[int, Example]:
        """Every example of both splits by its id; ids that repeat are a ``ValueError`` naming
        them (with one id for two examples, the reward rank would score a prompt against the
        other example's answer)."""
        by_id: dict[int, Example] = {}
        repeated: dict[int, list[str]] = {}
        for split in SPLITS:
            for ex in self.examples(split):
                if ex.id in by_id:
                    repeated.setdefault(ex.id, []).append(split)
                by_id[ex.id] = ex
        if repeated:
            shown = ", ".join(f"{i} (again in {' and '.join(s)})" for i, s in list(repeated.items())[:5])
            raise ValueError(
                f"{type(self).__name__}: example ids must be unique across both splits; "
                f"{len(repeated)} repeat{'s' if len(repeated) > 1 else ''}: {shown}"
                f"{', ...' if len(repeated) > 5 else ''}"
            )
        return by_id

    def example(self, example_id: int) -> Example:
        """The example with this id, from either split."""
        if self._by_id is None:
            self._by_id = self._index_by_id()
        try:
            return self._by_id[int(example_id)]
        except KeyError:
            raise KeyError(f"{type(self).__name__}: no example with id {example_id}") from None
