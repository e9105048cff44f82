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

from roles.algorithm.logprobs import pack_rows


def response_values(
    model: torch.nn.Module, prompt_ids_list: Sequence, response_ids_list: Sequence, pad_id: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, mask)``, both ``[B, T]`` with ``T`` the longest response: float32 values (0 on
    padding) that carry the graph when grad is enabled, and a bool mask of real response tokens.
    ``pad_id`` defaults to the model config's pad (or 0); pads sit under a 0 in the attention mask."""
    rows = pack_rows(model, prompt_ids_list, response_ids_list, pad_id)
    if rows is None:
        B, T = len(prompt_ids_list), max((len(r) for r in response_ids_list), default=0)
        device = next(model.parameters()).device
        return torch.zeros((B, T), device=device), torch.zeros((B, T), dtype=torch.bool, device=device)
    ids, attn, where, mask = rows.ids, rows.attn, rows.where, rows.mask
    with warnings.catch_warnings():
        # The one-label head's output is a view, which FSDP2 warns may lose its backward hook
        # to an in-place op; it is only read here (gather makes a new tensor).
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
        per_position = model(input_ids=ids, attention_mask=attn).logits[..., 0]  # [B, width]
    values = per_position.gather(1, where).float()
    return values.masked_fill(~mask, 0.0), mask
