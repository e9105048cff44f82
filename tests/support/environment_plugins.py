"""User environments and tools for the environment tests: well-behaved, slow, crashing, broken."""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from roles.environments.base import Environment, EnvironmentConfig, Opening, StepResult
from roles.environments.tools.base import Tool, ToolConfig, ToolError


class ScriptedConfig(EnvironmentConfig):
    greeting: str = "hello"


class ScriptedEnv(Environment):
    """A turn says what the step does: "sleep 2", "crash", "raise", else it is echoed."""

    Config = ScriptedConfig

    def tools(self):
        return [{"type": "function", "function": {"name": "echo", "description": "", "parameters": {"type": "object"}}}]

    def step(self, state, turn):
        if turn.startswith("sleep"):
            time.sleep(float(turn.split()[1]))
        elif turn == "crash":
            os._exit(3)
        elif turn == "raise":
            raise ValueError("a bad turn")
        return (state or 0) + 1, StepResult(messages=[{"role": "tool", "content": f"{self.config.greeting} {turn}"}])

    def final_reward(self, state):
        return float(state)


class DuckEnv:
    """Not an Environment subclass, but has what one needs."""

    def __init__(self, config, seed=0):
        self.config = config

    def tools(self):
        return []

    def reset(self, example, messages):
        return None

    def step(self, state, turn):
        return state, StepResult(messages=[], done=True)


class NoStepEnv:
    def __init__(self, config, seed=0):
        pass

    def tools(self):
        return []

    def reset(self, example, messages):
        return None


class BrokenEnv(Environment):
    def __init__(self, config, seed=0):
        raise RuntimeError("no data here")


class ShoutConfig(ToolConfig):
    times: int = 1


class ShoutTool(Tool):
    name: ClassVar[str] = "shout"
    description: ClassVar[str] = "Upper-cases text."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    Config = ShoutConfig

    def __call__(self, text: str) -> str:
        if text == "fail":
            raise ToolError("cannot shout that")
        if text == "bug":
            raise KeyError("oops")
        return text.upper() * self.config.times


class BadSchemaTool(Tool):
    name: ClassVar[str] = "bad_schema"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"x": {"type": 12}}}

    def __call__(self, **arguments) -> str:
        return ""


class NotATool:
    pass


class TurnsConfig(EnvironmentConfig):
    turns: int = 3  # model turns per episode
    fail_every: int = 0  # > 0: step raises for the examples whose id this divides


class TurnsEnv(Environment):
    """Every turn but the last gets a short observation, whatever it says: episodes of exactly
    ``turns`` turns (unless cut), for end-to-end runs with any model or engine."""

    Config = TurnsConfig

    def tools(self):
        return [{"type": "function", "function": {"name": "note", "description": "", "parameters": {"type": "object"}}}]

    def reset(self, example, messages):
        fails = self.config.fail_every > 0 and example.id % self.config.fail_every == 0
        return Opening(messages=list(messages), state=-1 if fails else 0)

    def step(self, state, turn):
        if state < 0:
            raise RuntimeError("this example breaks the environment")
        if state + 1 >= self.config.turns:  # a reward that differs between episodes: groups train
            return state + 1, StepResult(messages=[], done=True, reward=float(len(turn) % 3))
        info = {"tool_calls": 1.0, "tool_errors": float(state == 0), "tool_latency_s": 0.001}
        return state + 1, StepResult(messages=[{"role": "tool", "name": "note", "content": f"ok {state}"}], info=info)

    def final_reward(self, state):
        return 0.0
