"""Tools: the calculator, the sandboxed python tool, schemas and the registry."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest

from roles.environments.tools import ToolError, build_tool, check_tool_schema, tool_class
from roles.environments.tools.calculator import evaluate
from roles.plugins import PluginError

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("123+456", "579"),
        ("(2 + 3) * 4", "20"),
        ("7/2", "3.5"),
        ("6/2", "3"),
        ("2**10", "1024"),
        ("-(3)", "-3"),
        ("7 // 2", "3"),
        ("7 % 3", "1"),
        ("2**-2", "0.25"),
        ("1.5*2", "3"),
    ],
)
def test_calculator_values(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("9**9**9", "exponent"),
        ("10**1000 * 10**1000", "too large"),
        ("1/0", "division by zero"),
        ("x + 1", "Name"),
        ("abs(-1)", "Call"),
        ("(1).real", "Attribute"),
        ("1 +", "not an arithmetic"),
        ("(-8) ** 0.5", "not a real"),
        ("True + 1", "constant True"),
        ("'a' * 3", "constant"),
    ],
)
def test_calculator_refuses(expression, problem):
    started = time.monotonic()
    with pytest.raises(ToolError, match=problem):
        evaluate(expression)
    assert time.monotonic() - started < 1.0  # bounded before computing


def test_tool_spec_and_argument_validation():
    calc = build_tool("calculator")
    spec = calc.spec()
    assert spec["type"] == "function" and spec["function"]["name"] == "calculator"
    check_tool_schema(spec)
    assert calc(expression="1+1") == "2"
    with pytest.raises(ToolError, match="'expression' is a required property"):
        calc.check_arguments({})
    with pytest.raises(ToolError, match="at expression: 5 is not of type 'string'"):
        calc.check_arguments({"expression": 5})


def test_schema_check_names_the_tool_and_the_problem():
    with pytest.raises(ValueError, match=r"tool 't'.*not a valid JSON Schema.*12"):
        check_tool_schema({"type": "function", "function": {"name": "t", "parameters": {"type": 12}}})
    with pytest.raises(ValueError, match="type 'object'"):
        check_tool_schema({"type": "function", "function": {"name": "t", "parameters": {"type": "string"}}})
    with pytest.raises(ValueError, match="name"):
        check_tool_schema({"type": "function", "function": {"parameters": {}}})


def test_registry_and_user_tools():
    assert tool_class("calculator").name == "calculator"
    shout = build_tool("support.environment_plugins:ShoutTool", {"times": 2})
    assert shout(text="a") == "AA"
    with pytest.raises(PluginError, match="unknown tool 'nope'"):
        tool_class("nope")
    with pytest.raises(PluginError, match="not a subclass"):
        tool_class("support.environment_plugins:NotATool")
    with pytest.raises(ValueError, match="bad_schema"):
        tool_class("support.environment_plugins:BadSchemaTool")


# ---------------------------------------------------------------- the python sandbox


@pytest.fixture
def python():
    return build_tool("python", {"timeout_s": 2.0, "memory_mb": 512, "max_output_chars": 300})


def test_python_prints_its_result(python):
    assert python(code="print(sum(range(10)))") == "45"
    out = python(code="import sys; print('warn', file=sys.stderr); sys.exit(3)")
    assert "[stderr]\nwarn" in out and "[exit code 3]" in out


def test_python_scratch_folder_is_writable_and_removed(python):
    out = python(code="import os; open('a.txt', 'w').write('x'); print(os.getcwd())")
    assert out.startswith("/") and not os.path.exists(out)


def test_python_hang_is_cut_at_its_limit(python):
    started = time.monotonic()
    with pytest.raises(ToolError, match="timed out after 2 s"):
        python(code="while True: pass")
    assert time.monotonic() - started < 5.0


def test_python_output_flood_is_cut(python):
    out = python(code="print('x' * 10**6)")
    assert out.count("x") == 300 and "[output cut at 300 characters]" in out


def test_python_cannot_write_outside_its_folder(python):
    target = f"/tmp/mpirl-sandbox-test-{uuid.uuid4().hex}"
    out = python(code=f"open({target!r}, 'w').write('x')")
    assert "PermissionError" in out and not os.path.exists(target)
    out = python(code=f"import os; os.close(os.open({target!r}, os.O_CREAT | os.O_WRONLY))")
    assert "PermissionError" in out and not os.path.exists(target)


def test_python_cannot_connect_or_start_processes(python):
    out = python(code="import socket; socket.create_connection(('127.0.0.1', 9), timeout=1)")
    assert "not allowed in this sandbox: socket.connect" in out
    assert "not allowed" in python(code="import subprocess; subprocess.run(['true'])")
    assert "not allowed" in python(code="import os; os.system('true')")


def test_python_runs_without_network_where_namespaces_allow(python):
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:  # noqa: S607
        pytest.skip("no network namespaces here (neither root nor user namespaces)")
    interfaces = python(code="print(open('/proc/net/dev').read())")
    assert "lo:" in interfaces and "eth" not in interfaces.replace("lo:", "")


def test_python_memory_bomb_fails(python):
    out = python(code="x = bytearray(2 * 1024**3); print('allocated')")
    assert "MemoryError" in out and "allocated" not in out
