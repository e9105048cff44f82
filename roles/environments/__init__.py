"""Environments: multi-turn episodes and the tools a model calls in them.

``base`` is the interface (reset, step, final reward; the ``environment:`` section);
``ENVIRONMENTS`` the registry of built-ins (lazy ``module:attribute`` paths, as tasks and
rewards have), and a role map may name ``package.module:Class`` instead. ``tool_env`` is the
built-in ``tools`` environment, ``tools`` its tools, ``tool_calls`` the formats a model writes
its calls in. The generator runs episodes (``roles.episodes``); the calls into an environment
run in sandboxed worker processes (``pool``, ``pool_worker``).
"""

from __future__ import annotations

from roles import plugins
from roles.environments.base import Environment, EnvironmentConfig

ENVIRONMENTS: dict[str, str] = {
    "tools": "roles.environments.tool_env:ToolEnvironment",
}

REQUIRED_METHODS = ("reset", "step", "tools")


def environment_class(name: str) -> type:
    """The environment class called ``name``: a subclass of Environment, or a class with
    ``reset``, ``step`` and ``tools`` (and a ``Config`` subclassing EnvironmentConfig, if any)."""
    cls = plugins.resolve(name, ENVIRONMENTS, "environment")
    if not isinstance(cls, type):
        raise plugins.PluginError(f"environment {name!r} is not a class")
    if not issubclass(cls, Environment):
        missing = [m for m in REQUIRED_METHODS if not callable(getattr(cls, m, None))]
        if missing:
            raise plugins.PluginError(
                f"environment {name!r} is neither a subclass of roles.environments.base.Environment "
                f"nor has {', '.join(missing)}() (an environment needs {', '.join(REQUIRED_METHODS)})"
            )
    config = getattr(cls, "Config", EnvironmentConfig)
    if not (isinstance(config, type) and issubclass(config, EnvironmentConfig)):
        raise plugins.PluginError(f"environment {name!r}: its Config is not a subclass of EnvironmentConfig")
    plugins.check_signature(cls, (None, 0), f"environment {name!r}", "(config, seed)")
    return cls


def config_class(cls: type) -> type[EnvironmentConfig]:
    return getattr(cls, "Config", EnvironmentConfig)


def environment_section(value) -> EnvironmentConfig:
    """A role map's ``environment: {name: ..., <its own options>}``, validated by that
    environment's Config (as ``roles.tasks.task_section`` does for ``task:``)."""
    from roles.sections.base import field_error

    if isinstance(value, EnvironmentConfig):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"a mapping with the environment's name and options, got {type(value).__name__}")
    if "name" not in value:
        raise field_error(
            ("name",),
            f"required but missing (a built-in environment: {', '.join(sorted(ENVIRONMENTS))}; "
            "or package.module:Class)",
            value,
        )
    name = value["name"]
    if not isinstance(name, str):
        raise field_error(("name",), f"an environment name is a string, got {name!r}", name)
    try:
        cls = environment_class(name)
    except plugins.PluginError as e:
        raise field_error(("name",), str(e), name) from None
    return config_class(cls).model_validate(value)


def build_environment(config: EnvironmentConfig, seed: int = 0):
    """The environment a (validated) ``environment`` section describes."""
    return environment_class(config.name)(config, seed)


__all__ = [
    "ENVIRONMENTS",
    "Environment",
    "EnvironmentConfig",
    "build_environment",
    "config_class",
    "environment_class",
    "environment_section",
]
