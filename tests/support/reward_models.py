"""Tiny sequence-classification reward models for the tests, built and trained in seconds.

``train_parity_reward_model`` teaches one to prefer a property of the text that an arith
policy can learn to show: responses whose last digit is even score about +1, odd ones about
-1. It reads the conversation the way ``roles.rewards.learned.conversation`` renders it for
its own tokenizer (its chat template when it has one), so the same helper serves a reward
model that shares the policy's tokenizer and one of another family.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

from roles.rewards.learned.base import ScoreItem
from roles.rewards.learned.conversation import conversation_text, encode, uses_template


def save_reward_model(out: Path, tokenizer, *, hidden=64, layers=2, heads=2, seed=0) -> Path:
    """A random LlamaForSequenceClassification with one label over ``tokenizer``, saved in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=1,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(config)
    model.save_pretrained(str(out), safe_serialization=True)
    return out


def parity_items(n: int, seed: int = 0) -> list[tuple[ScoreItem, float]]:
    """Arith-shaped exchanges ``a+b=`` -> digits, each with its target: +1 even, -1 odd."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randrange(20), rng.randrange(20)
        response = str(rng.randrange(40))
        prompt = f"{a}+{b}="
        item = ScoreItem(messages=[{"role": "user", "content": prompt}], prompt=prompt, response=response, example=None)
        out.append((item, 1.0 if int(response[-1]) % 2 == 0 else -1.0))
    return out


def train_parity_reward_model(out: Path, tokenizer_dir: Path, *, steps=300, seed=0, **size) -> Path:
    """``save_reward_model`` over the tokenizer in ``tokenizer_dir``, trained to score
    even-ending responses +1 and odd ones -1 (mean squared error)."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    save_reward_model(out, tokenizer, seed=seed, **size)
    model = LlamaForSequenceClassification.from_pretrained(str(out))
    template = uses_template(tokenizer, True)
    data = parity_items(2048, seed)
    texts = [conversation_text(tokenizer, item, template) for item, _ in data]
    ids, _ = encode(tokenizer, texts, template, 256)
    targets = torch.tensor([t for _, t in data])
    width = max(len(x) for x in ids)
    batch_ids = torch.full((len(ids), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        batch_ids[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    last = mask.sum(1) - 1
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, len(ids), (64,), generator=gen)
        hidden = model.model(input_ids=batch_ids[rows], attention_mask=mask[rows]).last_hidden_state
        scores = model.score(hidden)[torch.arange(len(rows)), last[rows], 0]
        loss = torch.nn.functional.mse_loss(scores, targets[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(str(out), safe_serialization=True)
    return out
