"""Per-row token sampling for continuous batching, reproducible per sample.

Each row has its own sampling settings (training and greedy eval requests share a batch) and
its own seed. A row's token ``t`` is drawn by inverse CDF from the uniform
:func:`counter_uniform` (seed, t): a counter-based draw, so a sample's tokens depend on its
seed and its logits only, never on which rows it was batched with or when it joined.
"""

from __future__ import annotations

import numpy as np
import torch

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def counter_uniform(seeds, counters) -> np.ndarray:
    """A uniform in [0, 1) per (seed, counter) pair, float64, from a splitmix64 hash of both."""
    with np.errstate(over="ignore"):
        s = np.asarray(seeds, dtype=np.uint64) & _M64
        c = np.asarray(counters, dtype=np.uint64)
        h = _splitmix64(_splitmix64(s) ^ (c * np.uint64(0xD1B54A32D192ED03)))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def pick_rows(
    logits: torch.Tensor, temperature: np.ndarray, top_p: np.ndarray, seeds: np.ndarray, counters: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row, and its log-prob under the distribution it was drawn from
    (temperature and top-p applied; greedy rows, temperature 0: the unscaled softmax's, as the
    batch loop). The settings, seeds and counters are per row."""
    dev = logits.device
    logits = logits.float()
    temps = torch.from_numpy(np.asarray(temperature, np.float32)).to(dev)
    greedy = temps == 0
    logp = torch.log_softmax(logits / torch.where(greedy, 1.0, temps)[:, None], dim=-1)
    nucleus = np.where(np.asarray(temperature) > 0, np.asarray(top_p, np.float32), 1.0).astype(np.float32)
    if (nucleus < 1).any():
        logp = _nucleus(logp, torch.from_numpy(nucleus).to(dev))
    probs = logp.exp()
    cdf = probs.cumsum(dim=-1)
    u = torch.from_numpy(counter_uniform(seeds, counters).astype(np.float32)).to(dev)
    tok = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1).clamp(max=cdf.shape[1] - 1)
    # float rounding at the very top of the CDF can land on a token of probability 0: take the
    # most likely one there (a draw of u within 2**-24 of 1)
    best = logp.argmax(-1)
    tok = torch.where(probs.gather(-1, tok[:, None]).squeeze(1) > 0, tok, best)
    tok = torch.where(greedy, best, tok)
    return tok, logp.gather(-1, tok[:, None]).squeeze(1)


def _nucleus(logp: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Per row, the smallest set of most likely tokens reaching ``top_p`` mass, renormalised
    (rows with top_p 1 are left whole: float sums must not cut their tail)."""
    sorted_lp, order = logp.sort(dim=-1, descending=True)
    probs = sorted_lp.exp()
    mass_before = probs.cumsum(dim=-1) - probs
    cut = (mass_before >= top_p[:, None]) & (top_p[:, None] < 1)
    sorted_lp = sorted_lp.masked_fill(cut, float("-inf"))
    out = torch.full_like(logp, float("-inf")).scatter(-1, order, sorted_lp)
    return out - torch.logsumexp(out, dim=-1, keepdim=True)
