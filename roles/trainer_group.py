"""The training ranks as one data-parallel group: the collectives a trainer's step makes over
their ``torch.distributed`` group (agree on a flag, sum a count, average replicas' gradients,
reduce the step's metrics). With one trainer (no group) each is the identity.

Knows nothing of messages, the schedule or the loss: ``roles.trainer`` calls it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# Per-rank figures that add up over trainers; the rest are maxed, or averaged weighted by
# what each rank's figure is a mean over (_MEAN_OVER), so a trainer that had nothing to
# train on (its groups all scored the same) does not halve the step's ratio and KL figures.
_SUMMED = (
    "tokens",
    "samples",
    "trained_samples",
    "trained_tokens",
    "example_id_sum",
    "example_id_sqsum",
    "weight_send_bytes",
    "mixed_version_samples",
)
_MAXED = (
    "checkpoint_save_s",
    "nonfinite_skipped",
    "preempted",
    "staleness_max",
    "train_s",
    "weight_send_s",
    "weight_send_stall_s",
    "trainer_wait_s",
    "pushed_version",
    "logp_mismatch_max",
    "ratio_max",
    "version_spread_max",
)
# Means and what they are means over; any other averaged figure is a mean over the tokens
# trained on (the loss module's ratio, clip and KL figures, logp_mismatch_mean).
_MEAN_OVER = {
    "loss": "tokens",
    "reward_mean": "samples",
    "staleness_mean": "samples",
    "token_staleness_mean": "tokens",
    "grad_norm": None,
}


class TrainerGroup:
    def __init__(self, group, size: int):
        """``group``: the trainers' torch.distributed group (None: one trainer); ``size``: how many."""
        self.group = group
        self.size = size

    def agree(self, flag: bool, every: bool = False) -> bool:
        """Whether any training rank has the flag (or, with ``every``, all of them), the same
        answer on each (collective): all stop after the same step, all apply a step or none."""
        if self.group is None:
            return flag
        t = torch.tensor([float(flag)])
        dist.all_reduce(t, op=dist.ReduceOp.MIN if every else dist.ReduceOp.MAX, group=self.group)
        return bool(t.item())

    def most(self, mine: int) -> int:
        """The largest of every trainer's ``mine`` (a step's micro-batches: FSDP needs equal counts;
        and with them every rank reports the same metric keys, which ``reduce_metrics`` needs)."""
        if self.group is None:
            return mine
        t = torch.tensor([mine], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return int(t)

    def sum(self, value: float) -> float:
        if self.group is None:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, group=self.group)
        return float(t)

    def average_grads(self, parameters) -> None:
        """Average the gradients of full replicas in one flat all-reduce (DDP without hooks)."""
        parameters = list(parameters)
        for p in parameters:
            if p.grad is None:  # this rank trained on nothing (every group all-equal)
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in parameters]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.group)
        flat /= self.size
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """The step's figures over every trainer: summed, maxed or averaged, as each one means."""
        if self.group is None:
            return metrics
        keys = sorted(metrics)
        t = torch.tensor([metrics[k] for k in keys], dtype=torch.float64)
        summed, maxed = t.clone(), t.clone()
        dist.all_reduce(summed, group=self.group)
        dist.all_reduce(maxed, op=dist.ReduceOp.MAX, group=self.group)
        # Weighted means: all-reduce each figure times its rank's weight, then divide by the
        # summed weight (a plain mean when no rank has any weight, or for a figure every rank
        # shares, like the global gradient norm).
        weights = torch.tensor(
            [metrics.get(_MEAN_OVER.get(k, "trained_tokens")) or 0.0 for k in keys], dtype=torch.float64
        )
        shared = torch.tensor([_MEAN_OVER.get(k, "") is None for k in keys])
        weighted = torch.cat([t * weights, weights])
        dist.all_reduce(weighted, group=self.group)
        out = {}
        for i, k in enumerate(keys):
            total_weight = float(weighted[len(keys) + i])
            if k in _SUMMED:
                out[k] = float(summed[i])
            elif k in _MAXED:
                out[k] = float(maxed[i])
            elif total_weight > 0 and not shared[i]:
                out[k] = float(weighted[i]) / total_weight
            else:
                out[k] = float(summed[i]) / self.size
        return out
