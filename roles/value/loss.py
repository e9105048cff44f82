"""The clipped value loss (PPO's, as verl and OpenRLHF compute it), summed over tokens and
divided by a token count the caller gives (a whole step's, so micro-batches add up to its mean).

A stand-in until ``roles.algorithm.gae.value_loss`` (same signature) takes its place.
"""

from __future__ import annotations

import torch


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None,
    num_tokens: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``0.5 * max((v - R)^2, (v_clipped - R)^2)`` summed over ``mask`` / ``num_tokens``, where
    ``v_clipped = old + clamp(v - old, -clip, clip)`` keeps the value near the one the returns
    were computed with (``clip`` None: unclipped). All ``[B, T]``; returns the loss and
    ``{"value_clipped_tokens": the number of tokens whose clipped term was the larger}``."""
    unclipped = (values - returns) ** 2
    if clip is None:
        worst, clipped_tokens = unclipped, torch.zeros((), device=values.device)
    else:
        near_old = old_values + (values - old_values).clamp(-clip, clip)
        clipped = (near_old - returns) ** 2
        worst = torch.maximum(unclipped, clipped)
        clipped_tokens = ((clipped > unclipped) & mask).sum().float()
    loss = 0.5 * torch.where(mask, worst, torch.zeros_like(worst)).sum() / max(float(num_tokens), 1.0)
    return loss, {"value_clipped_tokens": clipped_tokens.detach()}
