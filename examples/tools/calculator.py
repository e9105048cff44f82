"""The demo's calculator outside the RL job: its spec, Hermes tool calls, and their results.

The warm start and the held-out loop (``prepare``, ``heldout``) play episodes without the RL
job's workers, with these: ``CALCULATOR_SPEC`` is the library's ``calculator`` spec (what the
job's chat template lists under ``tools=``), ``call_text`` writes a call as the model is taught
to, ``parse_call`` finds one in a turn's text and ``calculate`` answers it with the library's
evaluator (``error: ...`` for a bad call, as the job's ``tools`` environment answers).

Knows nothing of models, tokens or tasks.
"""

from __future__ import annotations

import json
import re
from typing import Any

from roles.environments.tools.base import ToolError
from roles.environments.tools.calculator import Calculator, evaluate

CALCULATOR_SPEC: dict[str, Any] = Calculator.spec()  # the library's, as the RL job renders it
TOOL_NAME = CALCULATOR_SPEC["function"]["name"]

# Hermes/Qwen2.5: a JSON object between <tool_call> and </tool_call> on lines of their own.
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


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
    """The tool's result text for a parsed call, and whether the call succeeded: what the
    library's ``tools`` environment answers (``error: ...`` for a bad call)."""
    if "error" in call:
        return f"error: {call['error']}", False
    if call["name"] != TOOL_NAME:
        return f"error: unknown tool {call['name']!r}", False
    expression = call["arguments"].get("expression")
    try:
        return evaluate(expression if isinstance(expression, str) else ""), True
    except ToolError as e:
        return f"error: {e}", False
