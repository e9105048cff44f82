"""Per-token estimators of KL(pi || ref) from tokens sampled by pi (Schulman's k1, k2, k3).

With ``d = log ref - log pi``: k1 = -d (unbiased, can be negative), k2 = d^2 / 2 (biased, low
variance), k3 = exp(d) - d - 1 (unbiased, never negative). Tensors in, tensor out.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_terms(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """The estimator's term at each token (0 off the mask, so padding cannot overflow)."""
    d = torch.where(mask, ref_logp - logp, torch.zeros_like(logp))
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return d.exp() - d - 1
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, not {estimator!r}")
