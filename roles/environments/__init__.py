"""Environments: multi-turn episodes and the tools a model calls in them.

``base`` is the interface (reset, step, final reward; the ``environment:`` section);
``ENVIRONMENTS`` the registry of built-ins (lazy ``module:attribute`` paths, as tasks and
rewards have), and a role map may name ``package.module:Class`` instead. The generator runs
episodes (``roles.episodes``); the calls into an environment run in sandboxed worker
processes (``pool``).
"""

from __future__ import annotations

ENVIRONMENTS: dict[str, str] = {
    "tools": "roles.environments.tool_env:ToolEnvironment",
}
