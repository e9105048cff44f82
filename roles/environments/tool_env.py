"""The built-in ``tools`` environment: the model calls tools until it answers without one.

Each turn's tool calls (``environment.tool_format``) run in order, one ``tool`` message per
call with the tool's text, or ``error: ...`` for a malformed call, an unknown tool, arguments
that do not fit the tool's schema, a ToolError or any other exception (counted as
``tool_errors``). A turn without a tool call (and no malformed one) ends the episode. The
state is the number of turns taken. The task's reward ranks score the final turn.

Not known here: tokens, the chat template, time limits on a whole step (the pool's).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from roles import plugins
from roles.environments.base import Environment, EnvironmentConfig, Opening, StepResult
from roles.environments.tool_calls import ToolCall, tool_format
from roles.environments.tools import Tool, ToolError, tool_class
from roles.sections.base import Section, field_error

INFO_KEYS = ("tool_calls", "tool_errors", "tool_latency_s")


class ToolEntry(Section):
    name: str  # a built-in tool (roles.environments.tools.TOOLS) or package.module:Class
    options: dict[str, Any] = Field(default_factory=dict)  # validated by the tool's Config


class ToolEnvironmentConfig(EnvironmentConfig):
    # Tools the model may call: names, or {name, options}.
    tools: list[str | ToolEntry] = Field(default_factory=lambda: ["calculator"])

    @field_validator("tools", mode="before")
    @classmethod
    def _entries(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [{"name": v} if isinstance(v, str) else v for v in value]

    @model_validator(mode="after")
    def _check_tools(self) -> ToolEnvironmentConfig:
        seen: dict[str, int] = {}
        for i, entry in enumerate(self.tools):
            assert isinstance(entry, ToolEntry)  # _entries made every name an entry
            cls = _checked_tool(i, entry)
            if cls.name in seen:
                raise field_error(
                    ("tools", i, "name"), f"a second tool called {cls.name!r} (tools[{seen[cls.name]}])", entry.name
                )
            seen[cls.name] = i
        try:
            tool_format(self.tool_format)
        except plugins.PluginError as e:
            raise field_error(("tool_format",), str(e), self.tool_format) from None
        return self


def _checked_tool(i: int, entry: ToolEntry) -> type[Tool]:
    try:
        cls = tool_class(entry.name)
    except ValueError as e:  # PluginError, or a bad schema (check_tool_schema)
        raise field_error(("tools", i, "name"), str(e), entry.name) from None
    try:
        cls.Config.model_validate(entry.options)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in e.errors())
        raise field_error(("tools", i, "options"), f"tool {entry.name!r}: {problems}", entry.options) from None
    return cls


class ToolEnvironment(Environment):
    Config = ToolEnvironmentConfig

    def __init__(self, config: ToolEnvironmentConfig, seed: int = 0):
        super().__init__(config, seed)
        self._format = tool_format(config.tool_format)
        self._tools: dict[str, Tool] = {}
        for entry in config.tools:
            assert isinstance(entry, ToolEntry)
            cls = tool_class(entry.name)
            self._tools[cls.name] = cls(cls.Config.model_validate(entry.options))

    def tools(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self._tools.values()]

    def reset(self, example, messages):
        return Opening(messages=list(messages), state=0)

    def step(self, state: Any, turn: str) -> tuple[Any, StepResult]:
        in_order = getattr(self._format, "parse_in_order", None)
        if in_order is not None:
            items = list(in_order(turn))
        else:
            calls, errors = self._format.parse(turn)
            items = [*calls, *errors]
        turns = int(state or 0) + 1
        if not items:
            return turns, StepResult(messages=[], done=True, info=dict.fromkeys(INFO_KEYS, 0.0))
        messages, errors, latency = [], 0, 0.0
        for item in items:
            if isinstance(item, ToolCall):
                started = time.monotonic()
                content, failed = self._run(item)
                latency += time.monotonic() - started
                messages.append({"role": "tool", "name": item.name, "content": content})
            else:
                content, failed = f"error: {item}", True
                messages.append({"role": "tool", "name": "error", "content": content})
            errors += failed
        info = {"tool_calls": float(len(items)), "tool_errors": float(errors), "tool_latency_s": latency}
        return turns, StepResult(messages=messages, done=False, info=info)

    def _run(self, call: ToolCall) -> tuple[str, bool]:
        """The call's observation text, and whether it failed."""
        tool = self._tools.get(call.name)
        if tool is None:
            return f"error: unknown tool {call.name!r} (tools: {', '.join(self._tools)})", True
        try:
            tool.check_arguments(call.arguments)
            return str(tool(**call.arguments)), False
        except ToolError as e:
            return f"error: {e}", True
        except Exception as e:  # noqa: BLE001 - a tool's bug is the model's observation, not the run's end
            return f"error: {type(e).__name__}: {e}", True


__all__ = ["ToolEntry", "ToolEnvironment", "ToolEnvironmentConfig"]
