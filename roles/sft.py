"""A short supervised warm start, so RL starts from a policy that sometimes gets rewards.

RL with a 0/1 verifier learns nothing from a random policy (every group scores 0, every
advantage is 0). A few hundred steps of teacher forcing on a quarter of the training pairs
give a policy that is right on part of the held-out pairs but far from saturated, which is
the regime where RL's gain is visible.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from roles.tasks.arith import ArithTask


@dataclass
class SFTConfig:
    fraction: float = 0.25  # share of the task's training pairs used for SFT
    steps: int = 400  # optimizer steps
    # AdamW learning rate (constant after a 5% warm-up). 1e-3 reaches a slightly higher held-out
    # accuracy (0.25-0.33 vs 0.24-0.29, seeds 0-2) but memorises its pairs so hard that groups
    # of samples agree and RL's advantages vanish. From 3e-4, the demo's RL (launch/recipe.py)
    # lifts held-out accuracy from about 0.29 to 0.41.
    lr: float = 3e-4
    batch: int = 32  # sequences per step, drawn with replacement
    seed: int = 0  # picks the SFT pairs and the order of the batches
    # torch intra-op threads while training (restored after). A 0.6M-parameter model has
    # nothing to split across threads; on a shared 2-core box 2 threads ran >10x slower than 1.
    threads: int | None = 1


def sft_warm_start(
    model_dir: str | Path,
    task: ArithTask,
    out_dir: str | Path | None = None,
    fraction: float = SFTConfig.fraction,
    steps: int = SFTConfig.steps,
    lr: float = SFTConfig.lr,
    batch: int = SFTConfig.batch,
    seed: int = SFTConfig.seed,
    threads: int | None = SFTConfig.threads,
) -> dict:
    """Train the model in ``model_dir`` on prompt+answer+EOS, loss on answer tokens only.

    Saves model and tokenizer to ``out_dir`` (``model_dir`` itself when None) and returns
    metrics: held-out greedy accuracy before and after, losses, seconds, pairs used.
    """
    cfg = SFTConfig(fraction, steps, lr, batch, seed, threads)
    prev_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _train(model_dir, task, out_dir, cfg)
    finally:
        torch.set_num_threads(prev_threads)


def _train(model_dir, task: ArithTask, out_dir, cfg: SFTConfig) -> dict:
    from transformers import AutoModelForCausalLM

    fraction, steps, lr, batch, seed = cfg.fraction, cfg.steps, cfg.lr, cfg.batch, cfg.seed
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    train = task.train_prompts()
    rng = np.random.default_rng(seed)
    pairs = [train[i] for i in rng.choice(len(train), int(round(fraction * len(train))), replace=False)]
    ids, _, labels = _tokenize(task, pairs)

    acc_before = task.heldout_accuracy(model)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 20)  # Adam's first steps are noisy; a short ramp keeps them small
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    loss = first_loss = torch.tensor(float("nan"))
    for step in range(steps):
        idx = torch.as_tensor(rng.integers(0, len(pairs), batch))
        # No attention mask: padding only trails each row, where causal attention already keeps
        # it from every real token, and its labels are -100. Skipping the mask saves ~15%.
        loss = model(input_ids=ids[idx], labels=labels[idx]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step == 0:
            first_loss = loss.detach()
    model.eval()
    acc_after = task.heldout_accuracy(model)

    out = Path(out_dir) if out_dir is not None else Path(model_dir)
    model.save_pretrained(str(out), safe_serialization=True)
    task.tokenizer.save_pretrained(str(out))
    return {
        **asdict(cfg),
        "pairs": len(pairs),
        "first_loss": float(first_loss),
        "final_loss": float(loss.detach()),
        "heldout_acc_before": acc_before,
        "heldout_acc_after": acc_after,
        "seconds": time.perf_counter() - t0,
        "out_dir": str(out),
    }


def _tokenize(task: ArithTask, pairs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``<bos> a+b= answer <eos>`` rows; labels are -100 except on the answer."""
    rows = [(task.encode_prompt(p), task.encode_answer(p)) for p in pairs]
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), task.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)  # HF's ignore index: prompt and padding carry no loss
    for i, (p, a) in enumerate(rows):
        seq = torch.as_tensor(np.concatenate([p, a]), dtype=torch.long)
        ids[i, : len(seq)] = seq
        mask[i, : len(seq)] = 1
        labels[i, len(p) : len(seq)] = seq[len(p) :]
    return ids, mask, labels
