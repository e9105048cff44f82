"""Tasks: prompt sources behind one interface (``roles.tasks.base.Task``), found by name.

``TASKS`` is the registry of built-ins (lazy ``module:Class`` paths, so naming one task imports
only it); a role map may also name its own task as ``package.module:Class``. The tiny local
models the tests and demos train live here too (``tiny_llama``).
"""

from __future__ import annotations

from roles import plugins
from roles.tasks.base import Example, Task, TaskConfig, TaskDataError

TASKS: dict[str, str] = {
    "arith": "roles.tasks.arith:ArithTask",
    "gsm8k": "roles.tasks.gsm8k:GSM8KTask",
    "math": "roles.tasks.math:MathTask",
    "dataset": "roles.tasks.dataset:DatasetTask",
}


def task_class(name: str) -> type[Task]:
    cls = plugins.resolve(name, TASKS, "task")
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise plugins.PluginError(f"task {name!r} is not a subclass of roles.tasks.base.Task")
    return cls


def build_task(config: TaskConfig, seed: int = 0) -> Task:
    """The task a role map's (validated) ``task`` section describes."""
    return task_class(config.name)(config, seed)


__all__ = ["Example", "Task", "TaskConfig", "TaskDataError", "TASKS", "task_class", "build_task"]
