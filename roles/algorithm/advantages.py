"""Group-relative advantages: each sample's reward against the other samples of its prompt.

The n samples of one prompt form a group; their mean reward is the baseline, so no value
network is needed (GRPO / LlamaRL). Options: divide by the group's standard deviation
(scale-free across prompts of different difficulty), or leave-one-out (RLOO: the baseline
excludes the sample itself, which makes it independent of that sample's own reward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass
class AdvantageConfig:
    baseline: Literal["mean", "leave_one_out"] = "mean"  # what is subtracted from each reward
    std_normalize: bool = False  # then divide by the group's (population) std + eps
    eps: float = 1e-6  # keeps a group with equal rewards at advantage 0 instead of 0/0


# Names a run config may use (``algorithm.advantage``).
ADVANTAGES = {
    "group_mean": AdvantageConfig(),
    "group_std": AdvantageConfig(std_normalize=True),
    "leave_one_out": AdvantageConfig(baseline="leave_one_out"),
}


def group_advantages(rewards, config: AdvantageConfig | str | None = None) -> np.ndarray:
    """Advantages for rewards of shape ``[n]`` (one group) or ``[groups, n]``; float32, same shape.

    mean:          A_i = r_i - mean(r)
    leave_one_out: A_i = r_i - mean_{j != i} r_j = n / (n - 1) * (r_i - mean(r)); 0 when n = 1
    std_normalize: A_i / (std(r) + eps), std over the group with ddof = 0
    """
    if config is None:
        config = AdvantageConfig()
    elif isinstance(config, str):
        try:
            config = ADVANTAGES[config]
        except KeyError:
            raise ValueError(f"unknown advantage {config!r}; known: {sorted(ADVANTAGES)}") from None
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim not in (1, 2):
        raise ValueError(f"rewards must be [n] or [groups, n], got shape {r.shape}")
    n = r.shape[-1]
    adv = r - r.mean(axis=-1, keepdims=True)
    if config.baseline == "leave_one_out":
        adv = adv * (n / (n - 1)) if n > 1 else np.zeros_like(adv)
    elif config.baseline != "mean":
        raise ValueError(f"unknown baseline {config.baseline!r}")
    if config.std_normalize:
        # The std of r / its largest |r|, scaled back: squaring rewards past ~1e154 overflows,
        # which made the std inf and every advantage of the group a silent 0.
        scale = np.abs(r).max(axis=-1, keepdims=True)
        scale = np.where(scale > 0, scale, 1.0)
        adv = adv / ((r / scale).std(axis=-1, keepdims=True) * scale + config.eps)
    return adv.astype(np.float32)
