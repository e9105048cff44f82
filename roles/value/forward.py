"""The value model's per-token values of response tokens: one right-padded forward pass over
prompt+response.

The value of response token t is that of the state it is sampled from: the head's output at
the position just before it, ``len(prompt) - 1 + t`` of the concatenated row (OpenRLHF's
``critic(seq)[:, prompt_len - 1 : -1]``). Rows are right-padded and positions count from 0 in
every row, so a row's values do not depend on the batch it is in.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch


def response_values(
    model: torch.nn.Module, prompt_ids_list: Sequence, response_ids_list: Sequence, pad_id: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, mask)``, both ``[B, T]`` with ``T`` the longest response: float32 values (0 on
    padding) that carry the graph when grad is enabled, and a bool mask of real response tokens.
    ``pad_id`` defaults to the model config's pad (or 0); pads sit under a 0 in the attention mask."""
    if len(prompt_ids_list) != len(response_ids_list):
        raise ValueError("need one response per prompt")
    device = next(model.parameters()).device
    prompts = [torch.as_tensor(p, dtype=torch.long).reshape(-1) for p in prompt_ids_list]
    responses = [torch.as_tensor(r, dtype=torch.long).reshape(-1) for r in response_ids_list]
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (the first response token's state ends on it)")
    if pad_id is None:
        pad_id = getattr(model.config, "pad_token_id", None) or 0
    B = len(prompts)
    T = max((len(r) for r in responses), default=0)
    if B == 0 or T == 0:
        return torch.zeros((B, T), device=device), torch.zeros((B, T), dtype=torch.bool, device=device)

    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = torch.full((B, width), pad_id, dtype=torch.long)
    attn = torch.zeros((B, width), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.bool)
    where = torch.zeros((B, T), dtype=torch.long)  # where[i, t]: the position valuing token t
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : len(p) + len(r)] = torch.cat([p, r])
        attn[i, : len(p) + len(r)] = 1
        mask[i, : len(r)] = True
        where[i] = len(p) - 1 + torch.arange(T).clamp(max=max(len(r) - 1, 0))
    ids, attn, where, mask = ids.to(device), attn.to(device), where.to(device), mask.to(device)

    with warnings.catch_warnings():
        # The one-label head's output is a view, which FSDP2 warns may lose its backward hook
        # to an in-place op; it is only read here (gather makes a new tensor).
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
        per_position = model(input_ids=ids, attention_mask=attn).logits[..., 0]  # [B, width]
    values = per_position.gather(1, where).float()
    return values.masked_fill(~mask, 0.0), mask
