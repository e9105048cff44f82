"""The tool demo's task and reward: multi-digit additions a tiny model cannot do in its head.

``AdditionTask`` asks "What is 4821+3075?" (operands of ``min_digits`` to ``max_digits`` digits);
the answer is the sum as text. The two splits hold distinct pairs, drawn as a pure function of
the seed, so every rank builds the same task without exchanging it. ``FinalAnswer`` scores an
episode's final turn: right when its text, spaces aside, is the sum.

Named in a role map as ``examples.tools.task:AdditionTask`` and ``examples.tools.task:FinalAnswer``.
Knows nothing of tools, templates or tokens: whether the model used the calculator to get
there is the environment's business; only the final answer is scored.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from roles.tasks.base import Example, Task, TaskConfig

# Markers a response decoded with its special tokens may end with (the chat EOS, the pad).
END_MARKS = ("<|im_end|>", "<|endoftext|>")


class AdditionTask(Task):
    """Sums of two operands of ``min_digits``..``max_digits`` digits; distinct pairs in both splits."""

    class Config(TaskConfig):
        name: str = "examples.tools.task:AdditionTask"
        # Digits of an operand at least and at most (each operand draws its own count). Four and
        # four by default: with operands of one width, copying them into a call is one fixed
        # offset, which the demo's tiny model learns in a few hundred SFT steps (3 to 4 digits:
        # over a thousand).
        min_digits: int = Field(4, ge=1, le=9)
        max_digits: int = Field(4, ge=1, le=9)
        train_size: int = Field(4000, gt=0)  # examples of the train split
        eval_size: int = Field(200, gt=0)  # examples of the eval split (held out: no pair repeats)

        @model_validator(mode="after")
        def _digits_in_order(self) -> AdditionTask.Config:
            if self.min_digits > self.max_digits:
                raise ValueError(f"min_digits ({self.min_digits}) must not exceed max_digits ({self.max_digits})")
            return self

    default_reward = "examples.tools.task:FinalAnswer"

    def __init__(self, config: AdditionTask.Config, seed: int = 0):
        super().__init__(config, seed)
        pairs = draw_pairs(config.train_size + config.eval_size, config.min_digits, config.max_digits, seed)
        examples = [addition_example(i, a, b) for i, (a, b) in enumerate(pairs)]
        self._splits = {"train": examples[: config.train_size], "eval": examples[config.train_size :]}


def draw_pairs(n: int, min_digits: int, max_digits: int, seed: int) -> list[tuple[int, int]]:
    """``n`` distinct (a, b) pairs, each operand of a uniformly drawn digit count; a pure function
    of the arguments. A ``ValueError`` when the digit range holds fewer than ``n`` pairs."""
    low, high = (10 ** (min_digits - 1) if min_digits > 1 else 0), 10**max_digits
    space = (high - low) ** 2
    if n > space // 2:  # rejection sampling would crawl (or never end) near the whole space
        raise ValueError(
            f"AdditionTask: {n} distinct pairs asked of operands with {min_digits}..{max_digits} digits; "
            f"use more digits or fewer examples (train_size + eval_size)"
        )
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, int]] = set()
    pairs: list[tuple[int, int]] = []
    while len(pairs) < n:
        a, b = (_operand(rng, min_digits, max_digits) for _ in range(2))
        if (a, b) not in seen:
            seen.add((a, b))
            pairs.append((a, b))
    return pairs


def _operand(rng: np.random.Generator, min_digits: int, max_digits: int) -> int:
    digits = int(rng.integers(min_digits, max_digits + 1))
    return int(rng.integers(10 ** (digits - 1) if digits > 1 else 0, 10**digits))


def addition_example(example_id: int, a: int, b: int) -> Example:
    return Example(id=example_id, prompt=f"What is {a}+{b}?", answer=str(a + b), metadata={"a": a, "b": b})


class FinalAnswer:
    """1.0 when the final turn's text is the answer (surrounding spaces and an end marker
    aside), else 0.0; ``correct`` is the same figure."""

    def __call__(self, response: str, example: Example) -> dict[str, float]:
        ok = 1.0 if final_text(response) == example.answer.strip() else 0.0
        return {"score": ok, "correct": ok}


def final_text(response: str) -> str:
    """The response's text before any end marker, spaces stripped."""
    for mark in END_MARKS:
        response = response.split(mark, 1)[0]
    return response.strip()
