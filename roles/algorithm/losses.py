"""Policy-gradient losses on per-token log-probs: AIPO (the default), PPO-clip (``grpo``,
``ppo``) and decoupled PPO, with the options every loss shares (``policy_loss``).

Shapes: ``logp``, ``old_logp``, ``mask`` are ``[B, T]`` (one row per response, right-padded);
``advantages`` is ``[B]`` (one per response, broadcast over its tokens) or ``[B, T]``.
``old_logp`` is the behaviour policy mu that sampled the tokens (the engines' log-probs).
By default the losses average over the valid tokens of the whole batch (padding excluded), so
a long response weighs by its length, as in the LlamaRL paper; ``agg``
(``roles.algorithm.aggregation``) picks another aggregation. Metrics are detached 0-dim
tensors (no device sync until the caller asks for ``.item()``). The formulas:
docs/algorithms.md.
"""

from __future__ import annotations

import torch

from roles.algorithm.aggregation import Aggregate
from roles.algorithm.corrections import mismatch_correction
from roles.algorithm.kl import kl_terms
from roles.algorithm.proximal import proximal_logp
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


def _masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, x, torch.zeros_like(x)).max() if x.numel() else torch.zeros((), device=x.device)


def aipo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    rho: float = 4.0,
    num_tokens: int | None = None,
    agg: Aggregate | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """AIPO: ``-mean_tokens( min(pi/mu, rho) * A * log pi )`` with the weight held constant.

    The weight is clipped from above only (a stale token whose ratio fell below 1 keeps its
    small weight; one whose ratio blew up is capped at rho) and is detached, so the gradient
    is ``weight * A * grad log pi`` exactly as in the paper's estimator.
    """
    old_logp, mask, adv, n = _prepare(logp, old_logp, advantages, mask, num_tokens)
    agg = agg or Aggregate(mask, num_units=num_tokens)
    log_ratio = torch.where(mask, logp.detach() - old_logp, torch.zeros_like(logp))
    ratio = log_ratio.exp()
    weight = ratio.clamp(max=rho)
    loss = -agg(weight * adv * logp)
    with torch.no_grad():
        metrics = {
            "loss": loss.detach(),
            "ratio_mean": _masked_mean(ratio, mask, n),
            "ratio_max": _masked_max(ratio, mask),
            "clip_frac": _masked_mean((ratio > rho).to(logp.dtype), mask, n),
            # k1 estimate of KL(mu || pi) on the sampled tokens: how far the learner has moved
            "kl_mu_pi": _masked_mean(-log_ratio, mask, n),
            "n_tokens": n.detach(),
        }
    return loss, metrics


def _clipped_surrogate(ratio, adv, clip_eps, clip_eps_high):
    """PPO's ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` and where the clip cut the gradient."""
    high = clip_eps if clip_eps_high is None else clip_eps_high
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + high) * adv)
    r = ratio.detach()
    clipped = ((r < 1 - clip_eps) & (adv < 0)) | ((r > 1 + high) & (adv > 0))
    return surrogate, clipped


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    num_tokens: int | None = None,
    clip_eps_high: float | None = None,
    agg: Aggregate | None = None,
    kl_estimator: str = "k3",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clipped surrogate ``-min(r A, clip(r, 1-eps, 1+eps_high) A)`` plus ``kl_coef * KL``.

    ``r = pi/mu``; ``clip_eps_high`` (None: ``clip_eps``) is DAPO's clip-higher. The KL to the
    reference is the ``kl_estimator`` (default k3, Schulman's unbiased, always-positive
    estimator of KL(pi || ref) from samples of pi: ``exp(ref - logp) - (ref - logp) - 1``).
    """
    if kl_coef and ref_logp is None:
        raise ValueError("grpo_loss: kl_coef > 0 needs ref_logp")
    old_logp, mask, adv, n = _prepare(logp, old_logp, advantages, mask, num_tokens)
    agg = agg or Aggregate(mask, num_units=num_tokens)
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    ratio = log_ratio.exp()
    surrogate, clipped = _clipped_surrogate(ratio, adv, clip_eps, clip_eps_high)
    pg_loss = -agg(surrogate)
    loss, metrics = _with_kl(pg_loss, logp, ref_logp, mask, agg, kl_coef, kl_estimator)
    with torch.no_grad():
        r = ratio.detach()
        metrics.update(
            loss=loss.detach(),
            pg_loss=pg_loss.detach(),
            ratio_mean=_masked_mean(r, mask, n),
            ratio_max=_masked_max(r, mask),
            # tokens whose gradient the clip switched off
            clip_frac=_masked_mean(clipped.to(logp.dtype), mask, n),
            n_tokens=n.detach(),
        )
    return loss, metrics


def _with_kl(loss, logp, ref_logp, mask, agg, kl_coef, estimator):
    """``loss + kl_coef * KL(pi || ref)`` and the KL figure (when there is a reference)."""
    metrics = {}
    if ref_logp is not None:
        ref_logp = torch.as_tensor(ref_logp, dtype=logp.dtype, device=logp.device)
        kl = agg(kl_terms(logp, ref_logp, mask, estimator))
        if kl_coef:
            loss = loss + kl_coef * kl
        metrics["kl_ref"] = kl.detach()
    return loss, metrics


def decoupled_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    prox_logp: torch.Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    cap: float | None = None,
    agg: Aggregate | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Decoupled PPO (AReaL): ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A) * w`` with
    ``r = pi/pi_prox`` and the behaviour weight ``w = pi_prox/mu`` (detached), truncated at
    ``cap`` (None: not truncated). ``prox_logp``: ``roles.algorithm.proximal``."""
    old_logp, mask, adv, n = _prepare(logp, old_logp, advantages, mask, None)
    agg = agg or Aggregate(mask)
    prox = torch.as_tensor(prox_logp, dtype=logp.dtype, device=logp.device).detach()
    ratio = torch.where(mask, logp - prox, torch.zeros_like(logp)).exp()
    raw_w = torch.where(mask, prox - old_logp, torch.zeros_like(logp)).exp()
    w = raw_w if cap is None else raw_w.clamp(max=cap)
    surrogate, clipped = _clipped_surrogate(ratio, adv, clip_eps, clip_eps_high)
    loss = -agg(surrogate * w)
    with torch.no_grad():
        r = ratio.detach()
        metrics = {
            "loss": loss.detach(),
            "ratio_mean": _masked_mean(r, mask, n),
            "ratio_max": _masked_max(r, mask),
            "clip_frac": _masked_mean(clipped.to(logp.dtype), mask, n),
            "behave_weight_mean": _masked_mean(w, mask, n),
            "behave_truncated_frac": _masked_mean((raw_w > cap).to(logp.dtype), mask, n) if cap else n * 0,
            "n_tokens": n.detach(),
        }
    return loss, metrics


def policy_loss(
    config: LossConfig,
    logp: torch.Tensor,
    old_logp,
    advantages,
    mask,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    staleness=None,
    constant: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss ``config`` names, with its own settings: the mismatch correction, the
    aggregation (``constant``: Dr. GRPO's length when ``loss_agg_constant`` is unset), the
    KL to ``ref_logp`` and the entropy bonus on ``entropy`` (per token, ``[B, T]``).
    ``staleness``: versions behind, per sample or per token (``proximal: loglinear``)."""
    mask = torch.as_tensor(mask, device=logp.device).to(torch.bool)
    mu = torch.as_tensor(old_logp, dtype=logp.dtype, device=logp.device)
    agg = Aggregate(mask, config.loss_agg, config.loss_agg_constant or constant)
    correction = config.correction
    _, keep, corr_metrics = mismatch_correction(
        correction, logp, mu, mask, config.correction_cap, config.correction_low, config.correction_high
    )
    agg.keeping(keep)
    # With a critic (advantage: gae) the KL is a penalty in the reward, not a loss term.
    kl_coef = config.kl_coef if getattr(config, "kl_in_loss", True) else 0.0
    if config.loss == "aipo":
        loss, metrics = aipo_loss(logp, mu, advantages, mask, rho=config.rho, agg=agg)
    elif config.loss == "decoupled" or correction == "tis":
        # tis with PPO-clip: the ratio is taken against the policy at the step's start and the
        # truncated weight min(pi_old/mu, cap) corrects for mu (verl's rollout correction):
        # decoupled PPO with recompute and decoupled_cap = correction_cap.
        tis = config.loss != "decoupled"
        prox = proximal_logp("recompute" if tis else config.proximal, logp, mu, staleness)
        cap = config.correction_cap if tis else config.decoupled_cap
        loss, metrics = decoupled_loss(
            logp, mu, advantages, mask, prox, config.clip_eps, config.clip_eps_high, cap, agg
        )
        loss, kl_metrics = _with_kl(loss, logp, ref_logp, mask, agg, kl_coef, config.kl_estimator)
        metrics.update(kl_metrics, loss=loss.detach())
    else:
        loss, metrics = grpo_loss(
            logp, mu, advantages, mask, config.clip_eps, kl_coef, ref_logp, None, config.clip_eps_high, agg,
            config.kl_estimator,
        )  # fmt: skip
    metrics.update(corr_metrics)
    if config.entropy_coef or entropy is not None:
        if entropy is None:
            raise ValueError("policy_loss: entropy_coef > 0 needs the per-token entropy")
        bonus = agg(entropy)
        loss = loss - config.entropy_coef * bonus
        metrics.update(entropy_mean=_masked_mean(entropy.detach(), mask, mask.sum().clamp(min=1)), loss=loss.detach())
    return loss, metrics
