"""Loss aggregation: how a step's per-token loss terms become one number (``algorithm.loss_agg``).

Every mode is ``sum over tokens (term * coef) / units``: the step's ``units`` are its tokens
(``token_mean``), its sequences (``seq_mean_token_sum``, and ``seq_mean_token_mean`` whose
``coef`` is 1 / the sequence's length), or its sequences times a constant length (``constant``,
Dr. GRPO). A micro-batch's loss divides by its own units; the trainer multiplies that back and
divides by the whole step's (``step_units``), so micro-batches and ranks add up to the step's
loss exactly. Knows nothing of the losses, the model or the trainers.
"""

from __future__ import annotations

import torch

AGGREGATIONS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant")


class Aggregate:
    """A micro-batch's aggregation: ``agg(x)`` is ``sum(where(keep, x * coef, 0)) / n``.

    ``mask``: the tokens the loss covers (what the units count); ``keep``: those whose terms
    enter the sum (a correction may mask some: they still count in the units, as a skipped
    all-equal group's tokens do, so the normaliser does not depend on the forward pass).
    ``num_units``: divide by this instead of the micro-batch's own units (the step's, in tests).
    """

    def __init__(self, mask: torch.Tensor, mode: str = "token_mean", constant: float | None = None, num_units=None):
        if mode not in AGGREGATIONS:
            raise ValueError(f"loss_agg must be one of {AGGREGATIONS}, not {mode!r}")
        if mode == "constant" and not constant:
            raise ValueError("loss_agg constant needs a constant length (> 0)")
        self.mask = self.keep = mask
        self.coef = None
        if mode == "token_mean":
            units = mask.sum()
        else:
            lengths = mask.sum(dim=1)
            units = (lengths > 0).sum() * (float(constant) if mode == "constant" else 1)
            if mode == "seq_mean_token_mean":
                self.coef = (1.0 / lengths.clamp(min=1).to(torch.float32))[:, None]
        self.units = units  # what the trainer multiplies the loss back by
        self.n = units.clamp(min=1) if num_units is None else torch.as_tensor(float(num_units))

    def keeping(self, keep: torch.Tensor | None) -> Aggregate:
        """The same aggregation, summing only over ``keep`` (within the mask)."""
        if keep is not None:
            self.keep = self.mask & keep
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.coef is not None:
            x = x * self.coef.to(x.dtype)
        # where(), not x * mask: a NaN or inf on a padding slot must not leak into the sum.
        return torch.where(self.keep, x, torch.zeros_like(x)).sum() / self.n


def step_units(mode: str, tokens: int, sequences: int, constant: float | None) -> float:
    """What the whole step's loss divides by (on one rank; the trainer sums over ranks)."""
    if mode == "token_mean":
        return float(tokens)
    return float(sequences) * (float(constant) if mode == "constant" else 1.0)
