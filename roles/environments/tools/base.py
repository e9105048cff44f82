"""The Tool interface: what a model may call in an episode, and how its arguments are checked.

A tool is a class with a ``name``, a ``description`` and ``parameters`` (a JSON Schema object,
what the chat template shows the model), a nested ``Config`` for its options, and
``__call__(**arguments) -> str``, the text the model sees. A problem the model should see (a
bad expression, a timeout) is a :class:`ToolError`; its message becomes an ``error: ...``
observation. Arguments are validated against ``parameters`` before the call
(:meth:`Tool.check_arguments`), and the schema itself when the role map is read
(:func:`check_tool_schema`).

Not known here: which tools exist (``roles.environments.tools.TOOLS``), tool-call formats,
episodes, processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jsonschema

from roles.sections.base import Section


class ToolError(Exception):
    """A failure the model should see (its message is the observation's text)."""


class ToolConfig(Section):
    """A tool's options (none by default); a tool subclasses it as its nested ``Config``."""


class Tool:
    """Base class of tools; see the module docstring."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    Config: ClassVar[type[ToolConfig]] = ToolConfig

    def __init__(self, config: ToolConfig | None = None):
        self.config = config if config is not None else self.Config()
        self._validator = jsonschema.Draft202012Validator(self.parameters)

    @classmethod
    def spec(cls) -> dict[str, Any]:
        """The function spec the chat template's ``tools=`` takes."""
        return {
            "type": "function",
            "function": {"name": cls.name, "description": cls.description, "parameters": cls.parameters},
        }

    def check_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Raise ToolError naming what is wrong when ``arguments`` do not fit ``parameters``."""
        problems = sorted(self._validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
        if problems:
            where = "/".join(str(p) for p in problems[0].absolute_path)
            at = f" at {where}" if where else ""
            raise ToolError(f"invalid arguments for {self.name}{at}: {problems[0].message}")

    def __call__(self, **arguments: Any) -> str:
        raise NotImplementedError


def check_tool_schema(spec: Mapping[str, Any]) -> None:
    """Raise ValueError naming the tool and the problem when ``spec`` is not a function spec
    whose ``parameters`` is a valid JSON Schema (draft 2020-12) of an object."""
    function = spec.get("function") if isinstance(spec, Mapping) else None
    if not isinstance(function, Mapping):
        raise ValueError(f"a tool spec is {{'type': 'function', 'function': {{...}}}}, got {spec!r}")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a tool spec needs a non-empty string 'name', got {name!r}")
    if not isinstance(function.get("description", ""), str):
        raise ValueError(f"tool {name!r}: its description is not a string")
    parameters = function.get("parameters")
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        raise ValueError(
            f"tool {name!r}: its parameters are not a valid JSON Schema{f' (at {where})' if where else ''}: {e.message}"
        ) from None
    if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
        raise ValueError(f"tool {name!r}: its parameters must be a schema of type 'object', got {parameters!r}")
