"""Generator/trainer mismatch corrections (``algorithm.correction``), orthogonal to the loss.

Each reads the ratio ``q = pi_old / mu`` per token: the trainer's probability of the sampled
token at the step's start (``logp.detach()``) over the generator's. It is 1 when both sides
compute the same numbers with the same weights; kernels, bf16 or int8 generators and policy
lag move it.

- ``tis``: a token weight ``min(q, cap)`` (truncated importance sampling);
- ``icepop``: tokens with ``q`` outside ``[low, high]`` leave the loss;
- ``seq_mask``: sequences whose geometric-mean ``q`` over their tokens is outside
  ``[low, high]`` leave the loss.

Tensors in, a weight (or None), a keep mask (or None) and metrics out: knows nothing of the
losses that use them.
"""

from __future__ import annotations

import torch

CORRECTIONS = ("none", "tis", "icepop", "seq_mask")


def mismatch_correction(
    kind: str, logp: torch.Tensor, mu: torch.Tensor, mask: torch.Tensor, cap=2.0, low=0.5, high=2.0
) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, torch.Tensor]]:
    """``(weight, keep, metrics)`` for ``kind``: a detached per-token weight for ``tis``, a
    bool mask of the tokens kept for ``icepop`` and ``seq_mask``; None where it has none.
    Metrics: the shares of the mask's tokens truncated or masked."""
    if kind not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, not {kind!r}")
    if kind == "none":
        return None, None, {}
    with torch.no_grad():
        log_q = torch.where(mask, logp.detach() - mu, torch.zeros_like(logp))
        n = mask.sum().clamp(min=1)
        zero = torch.zeros((), device=logp.device)
        if kind == "tis":
            q = log_q.exp()
            truncated = mask & (q > cap)
            frac = truncated.sum() / n
            return q.clamp(max=cap), None, {"correction_truncated_frac": frac, "correction_masked_frac": zero}
        if kind == "icepop":
            q = log_q.exp()
            keep = (q >= low) & (q <= high)
        else:  # seq_mask: the geometric mean of q over each sequence's tokens
            lengths = mask.sum(dim=1)
            seq_q = (log_q.sum(dim=1) / lengths.clamp(min=1)).exp()
            keep = ((seq_q >= low) & (seq_q <= high))[:, None].expand_as(mask)
        frac = (mask & ~keep).sum() / n
        return None, keep, {"correction_truncated_frac": zero, "correction_masked_frac": frac}
