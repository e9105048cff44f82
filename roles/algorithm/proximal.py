"""Decoupled PPO's proximal policy pi_prox (``algorithm.proximal``), per token, detached.

- ``recompute``: the policy at the step's start. The trainer takes one optimizer update per
  step, so that is the policy of the step's own forward pass: ``logp.detach()``, at no cost.
- ``loglinear``: A-3PO's approximation, as AReaL implements it (``prox_logp_method``):
  ``log pi_prox = log mu + alpha (log pi - log mu)`` with
  ``alpha = (v_prox - v_behave) / (v_theta - v_behave)`` clamped to [0, 1], where AReaL counts
  ``v_theta`` as the version being trained and ``v_prox = v_theta - 1``. In mpirl's terms a
  token sampled ``s`` versions before the trained one has ``alpha = s / (s + 1)``: a fresh token
  (s = 0) takes mu itself, a stale one leans towards pi. It saves a forward pass in systems
  that take several updates per step; here it only approximates what ``recompute`` has exactly.

Tensors in, tensor out: knows nothing of versions beyond the staleness it is given.
"""

from __future__ import annotations

import torch

PROXIMAL = ("recompute", "loglinear")


def loglinear_alpha(staleness: torch.Tensor) -> torch.Tensor:
    """A-3PO's interpolation weight for tokens ``staleness`` versions behind (0 -> 0, 1 -> 1/2)."""
    s = staleness.to(torch.float32).clamp(min=0)
    return s / (s + 1)


def proximal_logp(method: str, logp: torch.Tensor, mu: torch.Tensor, staleness=None) -> torch.Tensor:
    """log pi_prox per token (detached). ``staleness``: ``[B]`` or ``[B, T]`` versions behind,
    needed by ``loglinear``."""
    if method == "recompute":
        return logp.detach()
    if method != "loglinear":
        raise ValueError(f"proximal must be one of {PROXIMAL}, not {method!r}")
    if staleness is None:
        raise ValueError("proximal: loglinear needs each token's staleness")
    s = torch.as_tensor(staleness, device=logp.device)
    if s.dim() == 1:
        s = s[:, None]
    alpha = loglinear_alpha(s).expand_as(logp)
    return (mu + alpha * (logp.detach() - mu)).detach()
