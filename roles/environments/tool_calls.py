"""Tool-call formats: finding the calls a model wrote in its turn.

A format has ``parse(text) -> (calls, errors)``: the well-formed calls in order, and one
message per malformed call that names what is wrong ("tool call 2: not valid JSON: ...").
``FORMATS`` is the registry of built-ins (lazy ``module:Class`` paths); a role map may name
its own as ``package.module:Class`` (``environment.tool_format``). A format may also have
``parse_in_order(text) -> list[ToolCall | str]`` (calls and errors as written), which the
tools environment uses to answer them in order.

Not known here: which tools exist, running them, tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from roles import plugins

FORMATS: dict[str, str] = {
    "hermes": "roles.environments.tool_calls:HermesFormat",
}


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


class HermesFormat:
    """Hermes/Qwen calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any
    number a turn. ``arguments`` may be an object or a JSON string holding one; missing, none."""

    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def parse(self, text: str) -> tuple[list[ToolCall], list[str]]:
        items = self.parse_in_order(text)
        return [i for i in items if isinstance(i, ToolCall)], [i for i in items if isinstance(i, str)]

    def parse_in_order(self, text: str) -> list[ToolCall | str]:
        items: list[ToolCall | str] = []
        position = 0
        while (start := text.find(self.OPEN, position)) != -1:
            body_start = start + len(self.OPEN)
            close = text.find(self.CLOSE, body_start)
            reopen = text.find(self.OPEN, body_start)
            number = len(items) + 1
            if close == -1 or (reopen != -1 and reopen < close):
                end = reopen if reopen != -1 else len(text)
                items.append(f"tool call {number}: no closing {self.CLOSE}")
                position = end
                continue
            items.append(self._call(number, text[body_start:close]))
            position = close + len(self.CLOSE)
        return items

    @staticmethod
    def _call(number: int, body: str) -> ToolCall | str:
        try:
            data = json.loads(body.strip())
        except json.JSONDecodeError as e:
            return f"tool call {number}: not valid JSON: {e}"
        if not isinstance(data, dict):
            return f"tool call {number}: not a JSON object with 'name' and 'arguments'"
        name = data.get("name")
        if not isinstance(name, str) or not name:
            return f"tool call {number}: 'name' is missing or not a string"
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                return f"tool call {number} ({name}): 'arguments' is a string but not valid JSON: {e}"
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return f"tool call {number} ({name}): 'arguments' is not a JSON object"
        return ToolCall(name, arguments)


def tool_format(name: str) -> Any:
    """An instance of the format called ``name``, checked to have ``parse``."""
    cls = plugins.resolve(name, FORMATS, "tool-call format")
    obj = cls() if isinstance(cls, type) else cls
    if not callable(getattr(obj, "parse", None)):
        raise plugins.PluginError(f"tool-call format {name!r} has no parse(text) method")
    return obj


__all__ = ["FORMATS", "HermesFormat", "ToolCall", "tool_format"]
