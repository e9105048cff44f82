"""The value model as the critic ranks hold it: values of response tokens, and an optimizer step
on returns with the clipped value loss.

With several critic ranks the model is sharded (FSDP2) over their group, and every forward or
backward pass is collective over it: the ranks agree on the most micro-batches any of them has
and one with fewer runs filler passes (a one-token row; in training with zero weight), as the
trainers do (``roles.trainer``). The loss is the token mean over the whole step's rows on every
critic rank: each rank divides by the total token count and multiplies by the number of ranks,
which FSDP's gradient average divides back out. Knows nothing of messages, GAE or checkpoints'
layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from roles.algorithm.gae import value_loss
from roles.train_batch import pad
from roles.trainer_group import TrainerGroup
from roles.value.forward import response_values
from runtime.loop_clock import LOOP


class ValueModel:
    def __init__(
        self,
        model: torch.nn.Module,
        group=None,
        *,
        lr: float,
        weight_decay: float = 0.0,
        grad_clip: float | None = 1.0,
        micro_batch: int = 8,
    ):
        """``model``: what ``load_value_model`` returned, sharded over ``group`` (None or one
        rank: whole); ``grad_clip`` None or 0: the norm is measured, never clipped."""
        if micro_batch < 1:
            raise ValueError(f"micro_batch must be at least 1, got {micro_batch}")
        size = 1 if group is None else dist.get_world_size(group)
        if size > 1 and not isinstance(model, FSDPModule):
            raise ValueError(f"the value model is not sharded over its group of {size} critic ranks")
        self.model = model
        self.group = group if size > 1 else None
        self.ranks = TrainerGroup(self.group, size)  # agree, most, sum over the critic ranks
        self.micro_batch = micro_batch
        self.grad_clip = grad_clip or float("inf")
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999))
        self.pad_id = getattr(model.config, "pad_token_id", None) or 0
        self.filler = ([[self.pad_id]], [[self.pad_id]])  # one prompt token, one response token

    @torch.no_grad()  # not inference_mode: FSDP2's gathered parameters must stay ordinary tensors
    def values(self, prompts: Sequence, responses: Sequence) -> list[np.ndarray]:
        """Each response's per-token values (float32, one per token): the value of the state
        before the token. Collective over the critic ranks (each with its own rows, or none)."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
        self.model.eval()
        mb = self.micro_batch
        starts = list(range(0, len(prompts), mb))
        out: list[np.ndarray] = []
        for i in range(self.ranks.most(len(starts))):
            LOOP.tick()  # each micro-batch is progress (runtime.liveness)
            rows = slice(starts[i], starts[i] + mb) if i < len(starts) else slice(0, 0)
            if not any(len(r) for r in responses[rows]):
                # Nothing to value here while another critic rank has: keep its collectives in step.
                response_values(self.model, *self.filler, self.pad_id)
                out.extend(np.zeros(0, np.float32) for _ in responses[rows])
                continue
            v, _ = response_values(self.model, prompts[rows], responses[rows], self.pad_id)
            v = v.cpu().numpy()
            out.extend(v[j, : len(r)].copy() for j, r in enumerate(responses[rows]))
        self._reshard()
        return out

    def train_step(
        self, prompts: Sequence, responses: Sequence, returns: Sequence, old_values: Sequence, clip: float | None
    ) -> dict[str, float]:
        """One optimizer step on this rank's rows (per-token ``returns`` and the ``old_values``
        they were computed with, one per response token), the clipped value loss's token mean
        over every critic rank's rows. Collective over the critic ranks. A loss or gradient that
        is not finite on any rank: no rank updates (``nonfinite_skipped`` 1). Returns the step's
        figures, the same on every rank."""
        _check_rows(prompts, responses, returns, old_values)
        total = self.ranks.sum(float(sum(len(r) for r in responses)))
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        rows = (list(prompts), list(responses), list(returns), list(old_values))
        mb = self.micro_batch
        starts = list(range(0, len(prompts), mb))
        sums = np.zeros(3)  # this rank's loss (a share of the step's mean), clipped tokens, value sum
        for i in range(self.ranks.most(len(starts))):
            LOOP.tick()
            batch = tuple(col[starts[i] : starts[i] + mb] for col in rows) if i < len(starts) else None
            if batch is not None and any(len(r) for r in batch[1]):
                sums += self._micro_batch(batch, clip, total, weight=1.0)
            else:  # no tokens here while another rank has some: zero weight, only FSDP's collectives
                self._micro_batch((*self.filler, [[0.0]], [[0.0]]), clip, total, weight=0.0)
        grad_norm, applied = self._apply_update(float(sums[0]))
        sums = self._summed(sums)
        return {
            "value_loss": float(sums[0]),
            "value_clip_frac": float(sums[1]) / max(total, 1.0),
            "value_mean": float(sums[2]) / max(total, 1.0),
            "grad_norm": grad_norm,
            "tokens": total,
            "nonfinite_skipped": 0.0 if applied else 1.0,
        }

    def values_and_update(
        self, prompts: Sequence, responses: Sequence, returns_of: Callable[[list[np.ndarray]], Sequence]
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """``values`` and a first update toward ``returns_of(values)``, from the same forward
        passes: each micro-batch's graph is kept while ``returns_of`` runs (the critic sends the
        advantages out there), then the loss is taken from the kept graphs. The old values are
        the values themselves, so the value clip cannot bind at this update. One training pass
        instead of a forward pass and a training pass; it holds a step's activations at once.
        Collective over the critic ranks, like ``train_step``; returns (values, its figures)."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        mb = self.micro_batch
        starts = list(range(0, len(prompts), mb))
        kept, out = [], []
        for i in range(self.ranks.most(len(starts))):
            LOOP.tick()
            rows = slice(starts[i], starts[i] + mb) if i < len(starts) else slice(0, 0)
            real = any(len(r) for r in responses[rows])
            v, mask = response_values(
                self.model, *((prompts[rows], responses[rows]) if real else self.filler), self.pad_id
            )
            if real:
                got = v.detach().cpu().numpy()
                out.extend(got[j, : len(r)].copy() for j, r in enumerate(responses[rows]))
            else:
                out.extend(np.zeros(0, np.float32) for _ in responses[rows])
            kept.append((v, mask, rows if real else None))
        returns = list(returns_of(out))
        _check_rows(prompts, responses, returns, out)
        total = self.ranks.sum(float(sum(len(r) for r in responses)))
        sums = np.zeros(3)  # as train_step's
        for v, mask, rows in kept:
            target = (
                pad(returns[rows], 0.0, torch.float32)[:, : v.shape[1]].to(v.device) if rows else torch.zeros_like(v)
            )
            loss, _ = value_loss(v, v.detach(), target, mask, None, total)
            weight = 1.0 if rows else 0.0
            (loss * (self.ranks.size * weight)).backward()
            value_sum = float(v.detach().masked_fill(~mask, 0.0).sum())
            sums += np.array([float(loss.detach()), 0.0, value_sum]) * weight
        grad_norm, applied = self._apply_update(float(sums[0]))
        sums = self._summed(sums)
        return out, {
            "value_loss": float(sums[0]),
            "value_clip_frac": 0.0,
            "value_mean": float(sums[2]) / max(total, 1.0),
            "grad_norm": grad_norm,
            "tokens": total,
            "nonfinite_skipped": 0.0 if applied else 1.0,
        }

    def _micro_batch(self, rows: tuple, clip: float | None, total: float, weight: float) -> np.ndarray:
        """One micro-batch's forward and backward pass; its loss, clipped tokens and value sum."""
        prompts, responses, returns, old_values = rows
        values, mask = response_values(self.model, prompts, responses, self.pad_id)
        width = values.shape[1]
        device = values.device
        returns = pad(returns, 0.0, torch.float32)[:, :width].to(device)
        old_values = pad(old_values, 0.0, torch.float32)[:, :width].to(device)
        loss, m = value_loss(values, old_values, returns, mask, clip, total)
        # FSDP averages gradients over the ranks: times their number, the sum of the ranks' shares.
        (loss * (self.ranks.size * weight)).backward()
        value_sum = values.detach().masked_fill(~mask, 0.0).sum()
        return np.array([float(loss.detach()), float(m["value_clip_frac"]) * total, float(value_sum)]) * weight

    def _apply_update(self, loss: float) -> tuple[float, bool]:
        """Clip, and step if the loss and gradient are finite on every critic rank; the gradient
        norm (over every rank's shards: collective) and whether the update was applied."""
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip))
        finite = self.ranks.agree(math.isfinite(loss) and math.isfinite(grad_norm), every=True)
        if finite:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, finite

    def _summed(self, sums: np.ndarray) -> np.ndarray:
        if self.group is None:
            return sums
        t = torch.tensor(sums, dtype=torch.float64)
        dist.all_reduce(t, group=self.group)
        return t.numpy()

    def _reshard(self) -> None:
        """Free the gathered weights FSDP2's root keeps after a forward pass without gradients
        (it keeps them for a backward pass that never comes: an update or a checkpoint load
        would leave them stale)."""
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    # ------------------------------------------------------------------ checkpoint

    def save(self, folder: str | Path) -> None:
        """The model's and optimizer's shards into ``folder`` (collective over the critic ranks)."""
        from roles.value.checkpoint import save_value_state

        save_value_state(folder, self.model, self.optimizer, self.group)

    def load(self, folder: str | Path) -> None:
        """What :meth:`save` wrote, onto this many critic ranks (any: resharded). Collective."""
        from roles.value.checkpoint import load_value_state

        self._reshard()
        load_value_state(folder, self.model, self.optimizer, self.group)

    def export(self, out_dir: str | Path, tokenizer_dir: str | Path | None = None) -> None:
        """A Hugging Face folder of the value model (collective; the first critic rank writes)."""
        from roles.value.checkpoint import export_value_model

        export_value_model(self.model, out_dir, group=self.group, tokenizer_dir=tokenizer_dir)


def _check_rows(prompts, responses, returns, old_values) -> None:
    if not len(prompts) == len(responses) == len(returns) == len(old_values):
        raise ValueError(
            f"train_step needs one response, returns and old values per prompt: got {len(prompts)} prompts, "
            f"{len(responses)} responses, {len(returns)} returns, {len(old_values)} old values"
        )
    for i, (r, ret, old) in enumerate(zip(responses, returns, old_values)):
        if not len(r) == len(ret) == len(old):
            raise ValueError(
                f"row {i}: {len(r)} response tokens but {len(ret)} returns and {len(old)} old values (one per token)"
            )
