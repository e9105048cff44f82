"""Policy-gradient losses on per-token log-probs: AIPO (the default) and GRPO (PPO-clipped).

Shapes: ``logp``, ``old_logp``, ``mask`` are ``[B, T]`` (one row per response, right-padded);
``advantages`` is ``[B]`` (one per response, broadcast over its tokens) or ``[B, T]``.
``old_logp`` is the behaviour policy mu that sampled the tokens (the engines' log-probs).
Both losses average over the valid tokens of the whole batch (padding excluded), so a long
response weighs by its length, as in the LlamaRL paper. Metrics are detached 0-dim tensors
(no device sync until the caller asks for ``.item()``).
"""

from __future__ import annotations

import torch

from roles.sections.trainer import LossConfig


def _prepare(logp, old_logp, advantages, mask, num_tokens):
    # old_logp and advantages may arrive as numpy arrays straight from Rollout messages.
    old_logp = torch.as_tensor(old_logp, dtype=logp.dtype, device=logp.device)
    advantages = torch.as_tensor(advantages, device=logp.device)
    mask = torch.as_tensor(mask, device=logp.device).to(torch.bool)
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    advantages = advantages.to(logp.dtype).expand_as(logp)
    n_tokens = mask.sum().clamp(min=1) if num_tokens is None else torch.as_tensor(float(num_tokens))
    return old_logp, mask, advantages, n_tokens


def _masked_mean(x: torch.Tensor, mask: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    # where(), not x * mask: a NaN or inf on a padding slot must not leak into the sum.
    return torch.where(mask, x, torch.zeros_like(x)).sum() / n_tokens


def aipo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    rho: float = 4.0,
    num_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """AIPO: ``-mean_tokens( min(pi/mu, rho) * A * log pi )`` with the weight held constant.

    The weight is clipped from above only (a stale token whose ratio fell below 1 keeps its
    small weight; one whose ratio blew up is capped at rho) and is detached, so the gradient
    is ``weight * A * grad log pi`` exactly as in the paper's estimator.
    """
    old_logp, mask, adv, n = _prepare(logp, old_logp, advantages, mask, num_tokens)
    log_ratio = torch.where(mask, logp.detach() - old_logp, torch.zeros_like(logp))
    ratio = log_ratio.exp()
    weight = ratio.clamp(max=rho)
    loss = -_masked_mean(weight * adv * logp, mask, n)
    with torch.no_grad():
        metrics = {
            "loss": loss.detach(),
            "ratio_mean": _masked_mean(ratio, mask, n),
            "ratio_max": torch.where(mask, ratio, torch.zeros_like(ratio)).max(),
            "clip_frac": _masked_mean((ratio > rho).to(logp.dtype), mask, n),
            # k1 estimate of KL(mu || pi) on the sampled tokens: how far the learner has moved
            "kl_mu_pi": _masked_mean(-log_ratio, mask, n),
            "n_tokens": n.detach(),
        }
    return loss, metrics


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    num_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clipped surrogate ``-min(r A, clip(r, 1-eps, 1+eps) A)`` plus ``kl_coef * k3 KL``.

    k3 (Schulman's unbiased, always-positive estimator of KL(pi || ref) from samples of pi):
    ``exp(ref - logp) - (ref - logp) - 1``.
    """
    if kl_coef and ref_logp is None:
        raise ValueError("grpo_loss: kl_coef > 0 needs ref_logp")
    old_logp, mask, adv, n = _prepare(logp, old_logp, advantages, mask, num_tokens)
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    ratio = log_ratio.exp()
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    pg_loss = -_masked_mean(surrogate, mask, n)
    loss = pg_loss
    metrics = {}
    if ref_logp is not None:
        ref_logp = torch.as_tensor(ref_logp, dtype=logp.dtype, device=logp.device)
        d = torch.where(mask, ref_logp - logp, torch.zeros_like(logp))
        kl = _masked_mean(d.exp() - d - 1, mask, n)
        if kl_coef:
            loss = loss + kl_coef * kl
        metrics["kl_ref"] = kl.detach()
    with torch.no_grad():
        r = ratio.detach()
        clipped = ((r < 1 - clip_eps) & (adv < 0)) | ((r > 1 + clip_eps) & (adv > 0))
        metrics.update(
            loss=loss.detach(),
            pg_loss=pg_loss.detach(),
            ratio_mean=_masked_mean(r, mask, n),
            ratio_max=torch.where(mask, r, torch.zeros_like(r)).max(),
            # tokens whose gradient the clip switched off
            clip_frac=_masked_mean(clipped.to(logp.dtype), mask, n),
            n_tokens=n.detach(),
        )
    return loss, metrics


def policy_loss(
    config: LossConfig, logp: torch.Tensor, old_logp, advantages, mask, ref_logp: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss ``config`` names, with its own settings (``ref_logp``: GRPO's KL anchor)."""
    if config.loss == "aipo":
        return aipo_loss(logp, old_logp, advantages, mask, rho=config.rho)
    # With a critic (advantage: gae) the KL is a penalty in the reward, not a loss term.
    kl_coef = config.kl_coef if getattr(config, "kl_in_loss", True) else 0.0
    return grpo_loss(logp, old_logp, advantages, mask, clip_eps=config.clip_eps, kl_coef=kl_coef, ref_logp=ref_logp)
