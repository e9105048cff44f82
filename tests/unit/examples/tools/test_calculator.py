"""The demo's stand-in calculator: Hermes calls written, parsed and evaluated."""

from __future__ import annotations

import pytest

from examples.tools.calculator import calculate, call_text, parse_call

pytestmark = pytest.mark.timeout(30)


def test_a_written_call_parses_and_evaluates():
    text = call_text("4821+3075")
    assert text == '<tool_call>\n{"name": "calculator", "arguments": {"expression": "4821+3075"}}\n</tool_call>'
    assert calculate(parse_call(text)) == ("7896", True)


def test_no_call_and_bad_calls():
    assert parse_call("7896") is None
    for turn in ("<tool_call>\n{", "<tool_call>{nope}</tool_call>", '<tool_call>{"name": 1}</tool_call>'):
        result, ok = calculate(parse_call(turn))
        assert not ok and result.startswith("error:"), turn
    unknown = '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
    assert calculate(parse_call(unknown)) == ("error: unknown tool 'search'", False)
    product = '<tool_call>{"name": "calculator", "arguments": {"expression": "4*5"}}</tool_call>'
    assert calculate(parse_call(product)) == ("20", True)  # the library's calculator, not a+b only
    assert calculate(parse_call(product.replace("4*5", "import os")))[1] is False
