"""What is done to a learned reward's raw scores: normalisation, scale, offset, clipping.

Items that could not be scored (``None``) stay out of every mean and standard deviation and
score 0. Running statistics are Welford's, over every raw score the rank has given; they are
part of the rank's checkpoint (``state_dict``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from roles.rewards.learned.base import LearnedConfig

EPS = 1e-6  # below this standard deviation a group (or the running pool) is only centred


class Shaping:
    def __init__(self, config: LearnedConfig):
        self.config = config
        self.count, self.mean, self.m2 = 0, 0.0, 0.0  # running statistics (Welford)

    @property
    def is_identity(self) -> bool:
        c = self.config
        return c.normalize == "none" and c.scale == 1.0 and c.offset == 0.0 and c.clip is None

    def __call__(self, groups: Sequence[Sequence[float | None]]) -> list[list[float]]:
        cfg = self.config
        if cfg.normalize == "running":
            for group in groups:
                for x in group:
                    if x is not None:
                        self._add(x)
        out = []
        for group in groups:
            centre, spread = self._reference(group)
            shaped = []
            for x in group:
                if x is None:
                    shaped.append(0.0)
                    continue
                y = (x - centre) / spread * cfg.scale + cfg.offset
                if cfg.clip is not None:
                    y = min(max(y, -cfg.clip), cfg.clip)
                shaped.append(y)
            out.append(shaped)
        return out

    def _reference(self, group: Sequence[float | None]) -> tuple[float, float]:
        """(centre, spread) that a group's scores are normalised by."""
        mode = self.config.normalize
        if mode == "none":
            return 0.0, 1.0
        if mode == "running":
            std = math.sqrt(self.m2 / self.count) if self.count > 1 else 0.0
            return self.mean, std if std > EPS else 1.0
        scored = [x for x in group if x is not None]
        if not scored:
            return 0.0, 1.0
        mean = sum(scored) / len(scored)
        std = math.sqrt(sum((x - mean) ** 2 for x in scored) / len(scored))
        return mean, std if std > EPS else 1.0

    def _add(self, x: float) -> None:
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict) -> None:
        self.count, self.mean, self.m2 = int(state["count"]), float(state["mean"]), float(state["m2"])
