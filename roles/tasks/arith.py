"""The CPU demo task: two-number addition, ``a+b=`` -> ``a+b`` then EOS, for a, b < 20.

Small enough that a 0.6M-parameter Llama learns it in seconds, hard enough that a short
supervised warm start leaves room for RL to improve held-out accuracy. The split into
train and held-out pairs is a pure function of the seed, so every rank (controller,
reward, evaluator) derives the same split without exchanging it. ``ArithTask`` is what the
RL job sees (a ``Task``: prompts and answers), ``ArithExact`` its reward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from roles.tasks.base import Example, Task, TaskConfig


@dataclass(frozen=True)
class ArithPrompt:
    id: int  # a * max_operand + b: stable across runs and ranks
    a: int
    b: int

    @property
    def text(self) -> str:
        return f"{self.a}+{self.b}="

    @property
    def answer(self) -> str:
        return str(self.a + self.b)


def split_pairs(max_operand: int, heldout_fraction: float, seed: int) -> tuple[list[ArithPrompt], list[ArithPrompt]]:
    """(train, held-out) pairs: a pure function of its arguments, so every rank derives the same."""
    m = max_operand
    pairs = [ArithPrompt(a * m + b, a, b) for a in range(m) for b in range(m)]
    order = np.random.default_rng(seed).permutation(len(pairs))
    n_held = int(round(heldout_fraction * len(pairs)))
    # Sorted by id so the lists read naturally; the split itself is the permutation.
    heldout = sorted((pairs[i] for i in order[:n_held]), key=lambda p: p.id)
    train = sorted((pairs[i] for i in order[n_held:]), key=lambda p: p.id)
    return train, heldout


class ArithTask(Task):
    """The a+b demo as a task: train pairs, and the held-out pairs as the eval split."""

    class Config(TaskConfig):
        name: str = "arith"
        max_operand: int = Field(20, gt=1, le=1000)  # a, b < max_operand (all its² pairs are built)
        heldout_fraction: float = Field(0.2, gt=0, lt=1)  # pairs kept out of training (the eval split)

    default_reward = "arith_exact"

    def __init__(self, config: ArithTask.Config, seed: int = 0):
        super().__init__(config, seed)
        train, heldout = split_pairs(config.max_operand, config.heldout_fraction, seed)
        self._splits = {"train": [arith_example(p) for p in train], "eval": [arith_example(p) for p in heldout]}


def arith_example(p: ArithPrompt) -> Example:
    return Example(id=p.id, prompt=p.text, answer=p.answer, metadata={"a": p.a, "b": p.b})


class ArithExact:
    """The arith reward: 1.0 if the response is exactly the sum ("3+15=" -> "18"), else 0.0.

    It sees decoded text. Anything after an ``<eos>`` marker is ignored (text decoded without
    skipping special tokens); no other extra character is allowed, so "185" or "18 " score 0.
    """

    def __call__(self, response: str, example: Example) -> dict[str, float]:
        ok = 1.0 if response.split(EOS_MARK, 1)[0] == example.answer else 0.0
        return {"score": ok, "correct": ok}


EOS_MARK = "<eos>"


def arith_exact(prompt_text: str, response_text: str) -> float:
    """``ArithExact`` from the prompt's text instead of an example (checks the prompt is a+b)."""
    try:
        left, right = prompt_text.rstrip("=").split("+")
        want = str(int(left) + int(right))
    except ValueError as e:
        raise ValueError(f"not an arithmetic prompt: {prompt_text!r}") from e
    return ArithExact()(response_text, Example(id=0, prompt=prompt_text, answer=want))["score"]
