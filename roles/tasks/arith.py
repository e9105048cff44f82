"""The CPU demo task: two-number addition, ``a+b=`` -> ``a+b`` then EOS, for a, b < 20.

Small enough that a 0.6M-parameter Llama learns it in seconds, hard enough that a short
supervised warm start leaves room for RL to improve held-out accuracy. The split into
train and held-out pairs is a pure function of the seed, so every rank (controller,
reward, evaluator) derives the same split without exchanging it. ``ArithTask`` is what the
RL job sees (a ``Task``: prompts and answers), ``ArithExact`` its reward, and
``ArithTokens`` the demo's tooling over a tokenizer (warm start, held-out accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field

from roles.tasks.base import Example, Task, TaskConfig

ALPHABET = "0123456789+="  # every character a prompt or an answer can contain


@dataclass
class ArithConfig:
    """The split of ``ArithTokens`` (the RL job reads the same fields from ``ArithTask.Config``)."""

    max_operand: int = 20  # a and b are drawn from range(max_operand): 400 pairs by default
    heldout_fraction: float = 0.2  # share of pairs never trained on, for the held-out accuracy
    seed: int = 0  # seeds the train / held-out split


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


def _split(max_operand: int, heldout_fraction: float, seed: int) -> tuple[list[ArithPrompt], list[ArithPrompt]]:
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
        train, heldout = _split(config.max_operand, config.heldout_fraction, seed)
        self._splits = {"train": [_example(p) for p in train], "eval": [_example(p) for p in heldout]}


def _example(p: ArithPrompt) -> Example:
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


class ArithTokens:
    """The a+b task over one tokenizer: encoding, token-level scoring and greedy held-out accuracy.

    The demo's tooling (warm start, held-out accuracy before and after RL); the RL job itself
    sees only ``ArithTask`` and ``ArithExact``.
    """

    def __init__(self, tokenizer, config: ArithConfig | None = None):
        if isinstance(tokenizer, (str, Path)):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.tokenizer = tokenizer
        self.config = config or ArithConfig()
        self.eos_id = int(tokenizer.eos_token_id)
        self.pad_id = int(tokenizer.pad_token_id)
        m = self.config.max_operand
        self._train, self._heldout = _split(m, self.config.heldout_fraction, self.config.seed)
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
        return ArithExact()(text, _example(self.prompt(prompt)))["score"]

    def accuracy(self, model, prompts: list[ArithPrompt], tokenizer=None) -> float:
        """Share of ``prompts`` the model answers exactly under greedy decoding (one batch)."""
        import torch  # here, not at the top: reward workers import this module for its reward

        if tokenizer is not None and tokenizer is not self.tokenizer:
            return ArithTokens(tokenizer, self.config).accuracy(model, prompts)
        with torch.no_grad():
            responses = self._greedy(model, [self.encode_prompt(p) for p in prompts])
        return float(np.mean([self.score(p, r) for p, r in zip(prompts, responses)]))

    def heldout_accuracy(self, model, tokenizer=None) -> float:
        return self.accuracy(model, self._heldout, tokenizer)

    def _greedy(self, model, prompts: list[np.ndarray]) -> list[list[int]]:
        # Prompts and answers are a few tokens, so re-running the whole left-padded batch per
        # step is cheaper to read than a KV cache and still takes milliseconds.
        import torch

        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.as_tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        out = []
        for _ in range(self.max_answer_tokens):
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
            nxt = logits.argmax(-1, keepdim=True)
            out.append(nxt)
            ids = torch.cat([ids, nxt], dim=1)
            mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
        model.train(was_training)
        return torch.cat(out, dim=1).tolist()
