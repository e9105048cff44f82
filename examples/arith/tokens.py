"""The a+b demo's tooling over a tokenizer: the character set, encoding, scoring, held-out accuracy.

The warm start and the held-out accuracy before and after RL use it; the RL job itself sees
only ``ArithTask`` and ``ArithExact`` (``roles/tasks/arith.py``), whose split this one shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from examples.toy.heldout import greedy_accuracy
from roles.tasks.arith import ArithExact, ArithPrompt, arith_example, split_pairs

ALPHABET = "0123456789+="  # every character a prompt or an answer can contain


@dataclass
class ArithConfig:
    """The split of ``ArithTokens`` (the RL job reads the same fields from ``ArithTask.Config``)."""

    max_operand: int = 20  # a and b are drawn from range(max_operand): 400 pairs by default
    heldout_fraction: float = 0.2  # share of pairs never trained on, for the held-out accuracy
    seed: int = 0  # seeds the train / held-out split


class ArithTokens:
    """The a+b task over one tokenizer: encoding, token-level scoring and greedy held-out accuracy."""

    def __init__(self, tokenizer, config: ArithConfig | None = None):
        if isinstance(tokenizer, (str, Path)):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.tokenizer = tokenizer
        self.config = config or ArithConfig()
        self.eos_id = int(tokenizer.eos_token_id)
        self.pad_id = int(tokenizer.pad_token_id)
        m = self.config.max_operand
        self._train, self._heldout = split_pairs(m, self.config.heldout_fraction, self.config.seed)
        self._by_id = {p.id: p for p in self._train + self._heldout}
        # Answers are at most len(str(2*(m-1))) characters, plus EOS: enough for greedy decoding.
        self.max_answer_tokens = len(str(2 * (m - 1))) + 1

    def train_prompts(self) -> list[ArithPrompt]:
        return list(self._train)

    def heldout_prompts(self) -> list[ArithPrompt]:
        return list(self._heldout)

    def prompt(self, key: int | tuple[int, int] | ArithPrompt) -> ArithPrompt:
        """The prompt for an id, an (a, b) pair, or a prompt itself."""
        if isinstance(key, ArithPrompt):
            return key
        if isinstance(key, tuple):
            a, b = key
            key = a * self.config.max_operand + b
        return self._by_id[int(key)]

    def encode_prompt(self, prompt: ArithPrompt | str) -> np.ndarray:
        """int32 token ids: ``<bos>`` then the characters of ``a+b=``."""
        text = prompt.text if isinstance(prompt, ArithPrompt) else prompt
        return np.asarray(self.tokenizer(text).input_ids, dtype=np.int32)

    def encode_answer(self, prompt: ArithPrompt) -> np.ndarray:
        """int32 ids of the correct response: the answer's characters then EOS."""
        ids = self.tokenizer(prompt.answer, add_special_tokens=False).input_ids
        return np.asarray([*ids, self.eos_id], dtype=np.int32)

    def decode(self, ids) -> str:
        """Text of a response, cut at the first EOS, special tokens dropped."""
        ids = [int(i) for i in ids]
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def score(self, prompt: int | tuple[int, int] | ArithPrompt, response_ids) -> float:
        """``ArithExact`` on the response's text up to EOS, special tokens kept (a stray pad fails)."""
        ids = [int(i) for i in response_ids]
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return ArithExact()(text, arith_example(self.prompt(prompt)))["score"]

    def accuracy(self, model, prompts: list[ArithPrompt], tokenizer=None) -> float:
        """Share of ``prompts`` the model answers exactly under greedy decoding (one batch)."""
        if tokenizer is not None and tokenizer is not self.tokenizer:
            return ArithTokens(tokenizer, self.config).accuracy(model, prompts)
        encoded = {i: self.encode_prompt(p) for i, p in enumerate(prompts)}
        return greedy_accuracy(model, encoded, lambda i, ids: self.score(prompts[i], ids), self.max_answer_tokens)

    def heldout_accuracy(self, model, tokenizer=None) -> float:
        return self.accuracy(model, self._heldout, tokenizer)
