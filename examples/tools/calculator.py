"""The demo's stand-in calculator: its spec, Hermes tool calls, and an evaluator of "A+B".

Until the library's ``calculator`` tool and Hermes parser (``roles.environments``) land, the
demo's preparation runs its episodes with these: ``CALCULATOR_SPEC`` is what the chat template
lists under ``tools=``, ``call_text`` writes a call as the model is taught to, ``parse_call``
finds one in a turn's text and ``calculate`` evaluates sums of non-negative integers (anything
else is an error result, as a bad call is an error observation in an episode).

Knows nothing of models, tokens or tasks.
"""

from __future__ import annotations

import json
import re
from typing import Any

CALCULATOR_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}
TOOL_NAME = CALCULATOR_SPEC["function"]["name"]

# Hermes/Qwen2.5: a JSON object between <tool_call> and </tool_call> on lines of their own.
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_SUM = re.compile(r"\s*(\d+)\s*\+\s*(\d+)\s*")


def call_text(expression: str) -> str:
    """A model turn that calls the calculator, as Qwen2.5's template writes a tool call."""
    body = json.dumps({"name": TOOL_NAME, "arguments": {"expression": expression}})
    return f"<tool_call>\n{body}\n</tool_call>"


def parse_call(turn: str) -> dict[str, Any] | None:
    """The turn's first tool call as ``{"name", "arguments"}``; None when it makes none, and
    ``{"error": why}`` when it tries (``<tool_call>``) but the call is not a JSON object with a
    name and an arguments object."""
    if "<tool_call>" not in turn:
        return None
    found = _CALL.search(turn)
    if found is None:
        return {"error": "unclosed <tool_call>"}
    try:
        call = json.loads(found.group(1))
    except json.JSONDecodeError as e:
        return {"error": f"not JSON: {e.msg}"}
    if (
        not isinstance(call, dict)
        or not isinstance(call.get("name"), str)
        or not isinstance(call.get("arguments"), dict)
    ):
        return {"error": 'a call is {"name": ..., "arguments": {...}}'}
    return call


def calculate(call: dict[str, Any]) -> tuple[str, bool]:
    """The tool's result text for a parsed call, and whether the call succeeded."""
    if "error" in call:
        return f"Error: {call['error']}", False
    if call["name"] != TOOL_NAME:
        return f"Error: unknown tool {call['name']!r}", False
    expression = call["arguments"].get("expression")
    found = _SUM.fullmatch(expression) if isinstance(expression, str) else None
    if found is None:
        return f"Error: cannot evaluate {expression!r}", False
    return str(int(found.group(1)) + int(found.group(2))), True
