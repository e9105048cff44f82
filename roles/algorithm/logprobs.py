"""The learner's log pi of response tokens: one right-padded forward pass over prompt+response.

Same arithmetic as the engines' behaviour log-probs (``log_softmax(logits / temperature)``,
float32), so that with equal weights pi/mu is 1 up to rounding and AIPO's ratio measures
only policy lag, not a mismatch in how the two sides compute probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PackedRows:
    """Prompt+response rows right-padded into one batch, on the model's device."""

    ids: torch.Tensor  # [B, width] token ids, pad after each row
    attn: torch.Tensor  # [B, width] 1 on real tokens
    targets: torch.Tensor  # [B, T] the response tokens (pad after each)
    mask: torch.Tensor  # [B, T] real response tokens
    where: torch.Tensor  # [B, T] the position just before response token t (whose output predicts or values it)


def pack_rows(model, prompt_ids_list: Sequence, response_ids_list: Sequence, pad_id: int | None) -> PackedRows | None:
    """The rows of a forward pass over prompt+response, or None when there is no response token
    (``response_logprobs`` and the critic's ``response_values`` share it)."""
    if len(prompt_ids_list) != len(response_ids_list):
        raise ValueError("need one response per prompt")
    prompts = [torch.as_tensor(p, dtype=torch.long).reshape(-1) for p in prompt_ids_list]
    responses = [torch.as_tensor(r, dtype=torch.long).reshape(-1) for r in response_ids_list]
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (the first response token is predicted from it)")
    if pad_id is None:
        pad_id = getattr(model.config, "pad_token_id", None) or 0
    B = len(prompts)
    T = max((len(r) for r in responses), default=0)
    if B == 0 or T == 0:
        return None
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = torch.full((B, width), pad_id, dtype=torch.long)
    attn = torch.zeros((B, width), dtype=torch.long)
    targets = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.bool)
    where = torch.zeros((B, T), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : len(p) + len(r)] = torch.cat([p, r])
        attn[i, : len(p) + len(r)] = 1
        targets[i, : len(r)] = r
        mask[i, : len(r)] = True
        where[i] = len(p) - 1 + torch.arange(T).clamp(max=max(len(r) - 1, 0))
    device = next(model.parameters()).device
    return PackedRows(ids.to(device), attn.to(device), targets.to(device), mask.to(device), where.to(device))


def response_logprobs(
    model: torch.nn.Module,
    prompt_ids_list: Sequence,
    response_ids_list: Sequence,
    temperature: float = 1.0,
    pad_id: int | None = None,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, ...]:
    """log pi(response token | prompt, earlier response tokens) for a batch of sequences.

    Returns ``(logprobs, mask)``, both ``[B, T]`` with ``T`` the longest response:
    float32 log-probs (0 on padding) that carry the graph when grad is enabled, and a bool
    mask of real response tokens. ``pad_id`` defaults to the model config's pad (or 0); pads
    sit only after each sequence and under a 0 in the attention mask. ``with_entropy``: a
    third tensor, the policy's entropy over the vocabulary at each response position (with
    the graph; 0 on padding), for ``algorithm.entropy_coef``.
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    rows = pack_rows(model, prompt_ids_list, response_ids_list, pad_id)
    if rows is None:
        B, T = len(prompt_ids_list), max((len(r) for r in response_ids_list), default=0)
        device = next(model.parameters()).device
        empty = torch.zeros((B, T), device=device), torch.zeros((B, T), dtype=torch.bool, device=device)
        return (*empty, torch.zeros((B, T), device=device)) if with_entropy else empty
    # Only positions from the shortest prompt on predict response tokens: skip the rest of the
    # lm_head, which is most of the memory for a large vocabulary.
    first = min(len(p) for p in prompt_ids_list) - 1
    width = rows.ids.shape[1]
    where = rows.where - first
    logits = model(input_ids=rows.ids, attention_mask=rows.attn, logits_to_keep=width - first).logits
    logits = logits.gather(1, where[..., None].expand(-1, -1, logits.shape[-1]))
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, rows.targets[..., None]).squeeze(-1).masked_fill(~rows.mask, 0.0)
    if not with_entropy:
        return logp, rows.mask
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, rows.mask, entropy.masked_fill(~rows.mask, 0.0)
