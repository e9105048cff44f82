"""Generalised advantage estimation (GAE) and the clipped value loss: the critic's math.

One response of T tokens is one episode: ``values[t]`` is the critic's value of the state just
before token t is emitted, the value after the last token is 0 (the episode ends there), the
scalar reward arrives at the last token and optional per-token rewards (a KL penalty, say) at
every token. Advantages are numpy (as in ``advantages``); the value loss is torch (as in
``losses``: masked token means through ``torch.where``, metrics as detached 0-dim tensors).
Knows nothing of value models, ranks or how values were computed.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def _check_unit(name: str, x: float) -> float:
    x = float(x)
    if not 0.0 <= x <= 1.0:  # also refuses NaN
        raise ValueError(f"{name} must be in [0, 1], got {x}")
    return x


def gae(values, reward: float, gamma: float, lam: float, token_rewards=None) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns (float32, shape ``[T]``) of one response.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` with ``V_T = 0``, ``r_t = token_rewards[t]``
    plus ``reward`` at ``t = T - 1``; ``A_t = sum_k (gamma * lam)^k delta_{t+k}``;
    ``returns_t = A_t + V_t`` (the critic's regression target). Computed in float64.
    ``T = 0`` gives empty arrays (the reward has no token to land on).
    """
    gamma, lam = _check_unit("gamma", gamma), _check_unit("lam", lam)
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"values must be one response's [T] array, got shape {v.shape}")
    r = np.zeros_like(v)
    if token_rewards is not None:
        tr = np.asarray(token_rewards, dtype=np.float64)
        if tr.shape != v.shape:
            raise ValueError(f"token_rewards has shape {tr.shape}, values has {v.shape}")
        r += tr
    if v.size:
        r[-1] += float(reward)
    delta = r + gamma * np.append(v[1:], 0.0) - v
    adv = np.empty_like(v)
    running, decay = 0.0, gamma * lam
    # A backward recursion, A_t = delta_t + gamma * lam * A_{t+1}: a closed form through powers of
    # gamma * lam underflows on long responses.
    for t in range(v.size - 1, -1, -1):
        running = delta[t] + decay * running
        adv[t] = running
    return adv.astype(np.float32), (adv + v).astype(np.float32)


def gae_batch(
    values_list, rewards, gamma: float, lam: float, token_rewards_list=None
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``gae`` over many responses of any lengths: lists of advantages and of returns.

    ``token_rewards_list`` is None or one entry per response (an entry may be None).
    """
    n = len(values_list)
    if len(rewards) != n:
        raise ValueError(f"rewards has {len(rewards)} entries, values_list has {n}")
    if token_rewards_list is None:
        token_rewards_list = [None] * n
    elif len(token_rewards_list) != n:
        raise ValueError(f"token_rewards_list has {len(token_rewards_list)} entries, values_list has {n}")
    out = [gae(v, r, gamma, lam, tr) for v, r, tr in zip(values_list, rewards, token_rewards_list)]
    return [a for a, _ in out], [ret for _, ret in out]


def whiten(advantages_list, eps: float = 1e-8) -> list[np.ndarray]:
    """Advantages shifted and scaled over all tokens of the batch to mean 0, std 1 (float32).

    The std is the population one (ddof = 0); ``eps`` keeps a batch of equal advantages at 0.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in advantages_list]
    flat = np.concatenate([a.ravel() for a in arrays]) if arrays else np.zeros(0)
    if flat.size == 0:
        return [a.astype(np.float32) for a in arrays]
    mean, std = flat.mean(), flat.std()
    return [((a - mean) / (std + eps)).astype(np.float32) for a in arrays]


def _masked_mean(x: torch.Tensor, mask: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, x, torch.zeros_like(x)).sum() / n_tokens


def _explained_variance(v: torch.Tensor, r: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # 1 - Var(R - V) / Var(R) over this call's tokens; 0 when the returns do not vary.
    k = mask.sum().clamp(min=1)
    r_mean = _masked_mean(r, mask, k)
    var_r = _masked_mean((r - r_mean) ** 2, mask, k)
    res = r - v
    var_res = _masked_mean((res - _masked_mean(res, mask, k)) ** 2, mask, k)
    return torch.where(var_r > 0, 1 - var_res / var_r.clamp(min=torch.finfo(v.dtype).tiny), torch.zeros_like(var_r))


def value_loss(
    values: torch.Tensor,
    old_values,
    returns,
    mask,
    clip: float | None = 0.2,
    num_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss ``0.5 * max((V - R)^2, (V_old + clamp(V - V_old, -clip, clip) - R)^2)``.

    Shapes ``[B, T]`` (right-padded) or any shape, all alike; the mean is over the valid tokens,
    or the sum over them divided by ``num_tokens`` (the count over all data-parallel ranks, so
    the ranks' losses add up to the global mean; the mean metrics are then this rank's share).
    ``clip`` None or 0: unclipped. ``value_clip_frac``: share of tokens whose clipped term is
    the larger (where the move beyond ``clip`` gets no gradient).
    """
    if clip is not None and (math.isnan(clip) or clip < 0):
        raise ValueError(f"clip must be >= 0 or None, got {clip}")
    mask = torch.as_tensor(mask, device=values.device).to(torch.bool)
    like = dict(dtype=values.dtype, device=values.device)
    old_values, returns = torch.as_tensor(old_values, **like), torch.as_tensor(returns, **like)
    for name, t in (("old_values", old_values), ("returns", returns), ("mask", mask)):
        if t.shape != values.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, values has {tuple(values.shape)}")
    # Padding is zeroed before any arithmetic: a NaN there must reach neither the loss nor a gradient.
    zero = torch.zeros_like(values)
    v, old, r = (torch.where(mask, x, zero) for x in (values, old_values, returns))
    n = mask.sum().clamp(min=1) if num_tokens is None else torch.as_tensor(float(num_tokens), device=values.device)
    unclipped = (v - r) ** 2
    if clip:
        clipped = (old + (v - old).clamp(-clip, clip) - r) ** 2
        per_token, clip_hit = torch.maximum(unclipped, clipped), clipped > unclipped
    else:
        per_token, clip_hit = unclipped, torch.zeros_like(mask)
    loss = 0.5 * _masked_mean(per_token, mask, n)
    with torch.no_grad():
        vd = v.detach()
        metrics = {
            "loss": loss.detach(),
            "value_clip_frac": _masked_mean(clip_hit.to(values.dtype), mask, n),
            "explained_variance": _explained_variance(vd, r, mask),
            "value_mean": _masked_mean(vd, mask, n),
            "return_mean": _masked_mean(r, mask, n),
            "n_tokens": n.detach(),
        }
    return loss, metrics
