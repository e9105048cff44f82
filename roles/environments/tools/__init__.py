"""Tools a model calls in the built-in ``tools`` environment, found by name.

``TOOLS`` is the registry of built-ins (lazy ``module:Class`` paths); a role map may name its
own tool as ``package.module:Class`` (a subclass of ``base.Tool``). ``base`` is the interface,
``calculator`` and ``python`` the built-ins (``python_sandbox`` runs the python tool's code).
Not known here: tool-call formats, episodes, the worker processes tools run in.
"""

from __future__ import annotations

from typing import Any

from roles import plugins
from roles.environments.tools.base import Tool, ToolConfig, ToolError, check_tool_schema

TOOLS: dict[str, str] = {
    "calculator": "roles.environments.tools.calculator:Calculator",
    "python": "roles.environments.tools.python:PythonTool",
}


def tool_class(name: str) -> type[Tool]:
    """The registered or user tool class called ``name``, checked to be a Tool with a valid spec."""
    cls = plugins.resolve(name, TOOLS, "tool")
    if not (isinstance(cls, type) and issubclass(cls, Tool)):
        raise plugins.PluginError(f"tool {name!r} is not a subclass of roles.environments.tools.base.Tool")
    if not (isinstance(cls.Config, type) and issubclass(cls.Config, ToolConfig)):
        raise plugins.PluginError(f"tool {name!r}: its Config is not a subclass of ToolConfig")
    check_tool_schema(cls.spec())
    return cls


def build_tool(name: str, options: dict[str, Any] | None = None) -> Tool:
    """``Class(Class.Config(**options))`` for the tool called ``name``."""
    cls = tool_class(name)
    return cls(cls.Config.model_validate(dict(options or {})))


__all__ = ["TOOLS", "Tool", "ToolConfig", "ToolError", "build_tool", "check_tool_schema", "tool_class"]
