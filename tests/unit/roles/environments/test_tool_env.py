"""Tool-call parsing, the tools environment, and finding environments by name."""

from __future__ import annotations

import json

import pydantic
import pytest

from roles.environments import build_environment, environment_class, environment_section
from roles.environments.tool_calls import HermesFormat, ToolCall, tool_format
from roles.plugins import PluginError

pytestmark = pytest.mark.timeout(60)


def call(name, arguments, as_string=False):
    args = json.dumps(arguments) if as_string else arguments
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


# ---------------------------------------------------------------- hermes


def test_hermes_finds_several_calls_in_order():
    text = "Let me compute. " + call("calculator", {"expression": "1+2"}) + call("python", {"code": "print(1)"}, True)
    calls, errors = HermesFormat().parse(text)
    assert errors == []
    assert calls == [ToolCall("calculator", {"expression": "1+2"}), ToolCall("python", {"code": "print(1)"})]


def test_hermes_no_call():
    assert HermesFormat().parse("The answer is 579.") == ([], [])


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("<tool_call>{not json}</tool_call>", "tool call 1: not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "tool call 1: not a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "tool call 1: 'name' is missing"),
        ('<tool_call>{"name": "c", "arguments": 5}</tool_call>', "tool call 1 (c): 'arguments' is not a JSON object"),
        ('<tool_call>{"name": "c", "arguments": "{x"}</tool_call>', "tool call 1 (c): 'arguments' is a string but"),
        ('<tool_call>{"name": "c"}', "tool call 1: no closing </tool_call>"),
    ],
)
def test_hermes_names_what_is_wrong(body, problem):
    calls, errors = HermesFormat().parse(body)
    assert calls == [] and len(errors) == 1 and errors[0].startswith(problem)


def test_hermes_keeps_good_calls_beside_a_bad_one():
    text = "<tool_call>{oops</tool_call>" + call("calculator", {"expression": "2"})
    items = HermesFormat().parse_in_order(text)
    assert isinstance(items[0], str) and items[0].startswith("tool call 1:")
    assert items[1] == ToolCall("calculator", {"expression": "2"})


def test_formats_by_name():
    assert isinstance(tool_format("hermes"), HermesFormat)
    with pytest.raises(PluginError, match="unknown tool-call format"):
        tool_format("xml")


# ---------------------------------------------------------------- the tools environment


def tools_env(**options):
    return build_environment(environment_section({"name": "tools", **options}))


def test_tools_environment_runs_calls_and_reports():
    env = tools_env(tools=["calculator", {"name": "support.environment_plugins:ShoutTool", "options": {"times": 2}}])
    assert [s["function"]["name"] for s in env.tools()] == ["calculator", "shout"]
    opening = env.reset(None, [{"role": "user", "content": "hi"}])
    assert opening.messages == [{"role": "user", "content": "hi"}] and opening.state == 0
    turn = (
        call("calculator", {"expression": "123+456"})
        + call("shout", {"text": "a"})
        + "<tool_call>{bad}</tool_call>"
        + call("web", {})
        + call("calculator", {"expr": "1"})
        + call("shout", {"text": "fail"})
        + call("shout", {"text": "bug"})
    )
    state, result = env.step(opening.state, turn)
    assert state == 1 and not result.done
    contents = [m["content"] for m in result.messages]
    assert contents[0] == "579" and contents[1] == "AA"
    assert contents[2].startswith("error: tool call 3: not valid JSON")
    assert contents[3].startswith("error: unknown tool 'web'")
    assert contents[4].startswith("error: invalid arguments for calculator")
    assert contents[5] == "error: cannot shout that" and contents[6] == "error: KeyError: 'oops'"
    assert all(m["role"] == "tool" for m in result.messages) and result.messages[0]["name"] == "calculator"
    assert result.info["tool_calls"] == 7 and result.info["tool_errors"] == 5 and result.info["tool_latency_s"] >= 0


def test_a_turn_without_calls_ends_the_episode():
    state, result = tools_env().step(3, "The answer is 579")
    assert state == 4 and result.done and result.messages == [] and result.info["tool_calls"] == 0


@pytest.mark.parametrize(
    ("tools", "where", "problem"),
    [
        (["nope"], "tools.0.name", "unknown tool 'nope'"),
        (["calculator", {"name": "python", "options": {"timeot_s": 1}}], "tools.1.options", "timeot_s"),
        (["support.environment_plugins:BadSchemaTool"], "tools.0.name", "not a valid JSON Schema"),
        (["calculator", "calculator"], "tools.1.name", "a second tool called 'calculator'"),
    ],
)
def test_tool_config_errors_are_named(tools, where, problem):
    with pytest.raises(pydantic.ValidationError) as info:
        environment_section({"name": "tools", "tools": tools})
    assert where in str(info.value) and problem in str(info.value)


# ---------------------------------------------------------------- environments by name


def test_environment_classes():
    assert environment_class("tools").__name__ == "ToolEnvironment"
    assert environment_class("support.environment_plugins:DuckEnv").__name__ == "DuckEnv"
    with pytest.raises(PluginError, match=r"nor has step\(\)"):
        environment_class("support.environment_plugins:NoStepEnv")
    with pytest.raises(PluginError, match="unknown environment"):
        environment_class("gym")


def test_environment_section_uses_the_class_config():
    config = environment_section({"name": "support.environment_plugins:ScriptedEnv", "greeting": "hi", "workers": 1})
    assert config.greeting == "hi" and config.workers == 1
    with pytest.raises(pydantic.ValidationError, match="greting"):
        environment_section({"name": "support.environment_plugins:ScriptedEnv", "greting": "hi"})
    with pytest.raises(pydantic.ValidationError, match="name"):
        environment_section({"tools": []})
    assert tools_env(tool_format="hermes").config.tools[0].name == "calculator"
