"""A short supervised warm start, so RL starts from a policy that sometimes gets rewards.

RL with a 0/1 verifier learns nothing from a random policy (every group scores 0, every
advantage is 0). A few hundred steps of teacher forcing on part of the training set give a
policy that is right on part of the held-out examples but far from saturated, which is the
regime where RL's gain is visible.

``sft_train`` is the generic core: rows of (prompt token ids, target token ids), loss on the
targets only, an optional accuracy callback before and after. It knows nothing about tasks,
chat templates or rewards: the caller renders prompts and targets into ids (and ends each
target with EOS, so the model learns to stop) and says how accuracy is measured.
The demos' uses of it are ``examples/arith/prepare.py`` and ``examples/gsm8k/prepare.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

# (prompt token ids, target token ids), or with a third array: a 0/1 loss mask over the target
# (a multi-turn target's observations, which the model reads but does not write, carry none).
Row = tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class SFTConfig:
    fraction: float = 0.25  # share of the given rows used for SFT (drawn without replacement)
    steps: int = 400  # optimizer steps
    # AdamW learning rate (after a 5% warm-up). Too hot a warm start memorises its rows so hard
    # that the samples of a group agree and RL's advantages vanish (each demo's prepare.py
    # says how it chose its rate).
    lr: float = 3e-4
    batch: int = 32  # sequences per step, drawn with replacement
    seed: int = 0  # picks the SFT rows and the order of the batches
    # torch intra-op threads while training (restored after). A tiny model has nothing to
    # split across threads, and more of them only contend for the cores.
    threads: int | None = 1
    # The rate after the warm-up: "constant", or "cosine" down to a tenth of lr at the last
    # step (a short run of a small model ends at a lower loss when the rate decays).
    schedule: Literal["constant", "cosine"] = "constant"
    # Each step's rows sorted by length and cut into this many micro-batches, each padded only
    # to its own longest row; their gradients add up token-weighted, so the step is the same
    # batch's, without padding every row to the longest. Pays off when lengths are long-tailed.
    micro_batches: int = 1


def sft_train(
    model_dir: str | Path,
    tokenizer,
    rows: Sequence[Row],
    out_dir: str | Path | None = None,
    evaluate: Callable[[torch.nn.Module], float] | None = None,
    config: SFTConfig | None = None,
) -> dict:
    """Train the model in ``model_dir`` on ``config.fraction`` of ``rows``, loss on targets only.

    Saves model and ``tokenizer`` to ``out_dir`` (``model_dir`` itself when None) and returns
    metrics: ``evaluate(model)`` before and after (None without it), losses, seconds, rows used.
    """
    config = config or SFTConfig()
    prev_threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        return _train(model_dir, tokenizer, rows, out_dir, evaluate, config)
    finally:
        torch.set_num_threads(prev_threads)


def _train(model_dir, tokenizer, rows: Sequence[Row], out_dir, evaluate, cfg: SFTConfig) -> dict:
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    lr_factor = _lr_factor(cfg)  # a bad schedule fails before any work
    n_chosen = int(round(cfg.fraction * len(rows)))
    if n_chosen < 1:
        raise ValueError(f"SFT: fraction {cfg.fraction} of {len(rows)} rows leaves none to train on")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    rng = np.random.default_rng(cfg.seed)
    chosen = [rows[i] for i in rng.choice(len(rows), n_chosen, replace=False)]
    # Padding trails each row under label -100 (and no attention reaches it): any id will do,
    # so a tokenizer without a pad token (GPT-2's, Llama's) pads with its EOS, or 0.
    pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    ids, _, labels = _pad_rows(chosen, int(pad))

    acc_before = evaluate(model) if evaluate is not None else None
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    loss = first_loss = torch.tensor(float("nan"))
    for step in range(cfg.steps):
        idx = torch.as_tensor(rng.integers(0, len(chosen), cfg.batch))
        opt.zero_grad(set_to_none=True)
        loss = _backward(model, ids[idx], labels[idx], cfg.micro_batches)
        opt.step()
        sched.step()
        if step == 0:
            first_loss = loss.detach()
    model.eval()
    acc_after = evaluate(model) if evaluate is not None else None

    out = Path(out_dir) if out_dir is not None else Path(model_dir)
    model.save_pretrained(str(out), safe_serialization=True)
    # A chat template stays in tokenizer_config.json, where it was (examples.toy.tiny_bpe).
    tokenizer.save_pretrained(str(out), save_jinja_files=False)
    from roles.models.tokenizer import remember_tokenizer_class

    remember_tokenizer_class(str(out))  # the RL job's controller then loads it without the auto classes
    return {
        **asdict(cfg),
        "pairs": len(chosen),
        "first_loss": float(first_loss),
        "final_loss": float(loss.detach()),
        "heldout_acc_before": acc_before,
        "heldout_acc_after": acc_after,
        "seconds": time.perf_counter() - t0,
        "out_dir": str(out),
    }


def _backward(model, ids: torch.Tensor, labels: torch.Tensor, micro_batches: int) -> torch.Tensor:
    """Back-propagate the batch's mean loss over its target tokens; return that loss (detached).

    No attention mask: padding only trails each row, where causal attention already keeps it
    from every real token, and its labels are -100; without a mask each step is cheaper.
    """
    if micro_batches <= 1:
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        return loss.detach()
    counted = (labels[:, 1:] != -100).sum(1)  # the targets HF's shifted loss averages over
    total = counted.sum().clamp(min=1)
    positions = torch.arange(1, labels.shape[1] + 1)
    lengths = torch.where(labels != -100, positions, 0).amax(1)  # targets end each row
    loss = torch.zeros(())
    for part in torch.tensor_split(torch.argsort(lengths), micro_batches):
        if len(part) == 0 or counted[part].sum() == 0:
            continue
        width = int(lengths[part].max())
        part_loss = model(input_ids=ids[part, :width], labels=labels[part, :width]).loss
        weight = counted[part].sum() / total
        (part_loss * weight).backward()
        loss += part_loss.detach() * weight
    return loss


def _lr_factor(cfg: SFTConfig) -> Callable[[int], float]:
    warmup = max(1, cfg.steps // 20)  # Adam's first steps are noisy; a short ramp keeps them small
    if cfg.schedule == "constant":
        return lambda s: min(1.0, (s + 1) / warmup)
    if cfg.schedule != "cosine":
        raise ValueError(f"SFTConfig.schedule must be 'constant' or 'cosine', got {cfg.schedule!r}")
    floor = 0.1

    def cosine(s: int) -> float:
        done = min(s, cfg.steps) / cfg.steps
        return min(1.0, (s + 1) / warmup) * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * done)))

    return cosine


def _pad_rows(rows: Sequence[Row], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt+target rows; labels are -100 except on the target (where its mask,
    if the row has one, is 1)."""
    width = max(len(r[0]) + len(r[1]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)  # HF's ignore index: prompt and padding carry no loss
    for i, (p, t, *loss_mask) in enumerate(rows):
        seq = torch.as_tensor(np.concatenate([p, t]), dtype=torch.long)
        ids[i, : len(seq)] = seq
        mask[i, : len(seq)] = 1
        target = seq[len(p) :]
        if loss_mask:
            if len(loss_mask[0]) != len(t):
                raise ValueError(f"SFT row {i}: a loss mask of {len(loss_mask[0])} for a target of {len(t)} tokens")
            target = torch.where(torch.as_tensor(loss_mask[0]).bool(), target, -100)
        labels[i, len(p) : len(seq)] = target
    return ids, mask, labels
