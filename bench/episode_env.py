"""The environment of ``bench/episodes.py``: a tool that only takes time.

Each model turn before the last ``tool_turns`` gets a short tool result after a latency drawn
from a lognormal whose 5th-to-95th percentile ratio is ``spread`` (median ``latency_ms``),
cut to [p5, p95]: a tool whose calls vary ``spread``-fold, as search or code execution do.
The turn's text is not read (the bench's engine samples random tokens).
"""

from __future__ import annotations

import math
import time

import numpy as np
from pydantic import Field

from roles.environments.base import Environment, EnvironmentConfig, Opening, StepResult

Z95 = 1.6449  # the standard normal's 95th percentile


class LatencyTools(Environment):
    class Config(EnvironmentConfig):
        name: str = "episode_env:LatencyTools"
        tool_turns: int = Field(2, ge=0)  # turns answered by the tool; the next one ends the episode
        latency_ms: float = Field(30.0, gt=0)  # the median call
        spread: float = Field(10.0, ge=1)  # p95 / p5 of a call's latency

    def __init__(self, config: Config, seed: int = 0):
        super().__init__(config, seed)
        self.rng = np.random.default_rng()  # each worker its own draws
        self.sigma = math.log(config.spread) / (2 * Z95)

    def tools(self):
        return [{"type": "function", "function": {"name": "wait", "description": "Takes a while.", "parameters": {}}}]

    def reset(self, example, messages):
        return Opening(messages=list(messages), state=0)

    def step(self, state, turn):
        if state >= self.config.tool_turns:
            return state, StepResult([], done=True)
        z = float(np.clip(self.rng.standard_normal(), -Z95, Z95))
        time.sleep(self.config.latency_ms / 1000 * math.exp(self.sigma * z))
        return state + 1, StepResult([{"role": "tool", "name": "wait", "content": "ok"}], info={"tool_calls": 1.0})
