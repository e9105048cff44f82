"""``world.generator.sim``: the modelled cost of the ``sim`` engine (``roles.engines.sim_engine``).

Apart from the engine so that the role map parses it without importing an engine.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from roles.sections.base import Section


class LengthModel(Section):
    """How long each simulated response is, in tokens (capped at ``rollout.max_new_tokens``)."""

    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    mean: float = Field(64.0, gt=0, le=2**20)  # fixed: the length; uniform: the middle of [1, 2 mean - 1]
    sigma: float = Field(1.0, ge=0, le=10)  # lognormal: the spread of log(length); 1.0 is a long tail

    def draw(self, rng: np.random.Generator, n: int, cap: int) -> np.ndarray:
        if self.kind == "fixed":
            raw = np.full(n, self.mean)
        elif self.kind == "uniform":
            raw = rng.uniform(1, 2 * self.mean - 1, n) if self.mean > 1 else np.ones(n)
        else:  # lognormal with this mean: mu = log(mean) - sigma^2 / 2
            raw = rng.lognormal(np.log(self.mean) - self.sigma**2 / 2, self.sigma, n)
        return np.clip(np.rint(raw), 1, cap).astype(np.int64)


class SimConfig(Section):
    """``world.generator.sim``: the modelled cost of generation (engine: sim only)."""

    per_token_s: float = Field(0.001, ge=0, le=10)  # one decode step of a batch, whatever its rows
    # and per row of that step: a batch of r rows decodes a step in per_token_s + r x this (the
    # part that more generator ranks split between them)
    per_row_token_s: float = Field(0.0, ge=0, le=10)
    per_batch_s: float = Field(0.0, ge=0, le=600)  # fixed cost of a batch (prefill, scheduling)
    vocab: int = Field(1000, gt=1, le=2**24)
    lengths: LengthModel = LengthModel()
