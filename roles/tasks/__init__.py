"""Tasks: prompt sources behind one interface (``roles.tasks.base.Task``), found by name.

``TASKS`` is the registry of built-ins (lazy ``module:Class`` paths, so naming one task imports
only it); a role map may also name its own task as ``package.module:Class``. A task owns its
prompts, reference answers and default reward; ``file_task`` and ``files`` are what the
tasks backed by local data files share.

A task knows nothing of tokenizers (turning a prompt into token ids is ``prompts``'s job),
generation, scoring processes or ranks: the actors drive it.
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
    if not (isinstance(cls.Config, type) and issubclass(cls.Config, TaskConfig)):
        raise plugins.PluginError(f"task {name!r}: its Config is not a subclass of roles.tasks.base.TaskConfig")
    plugins.check_signature(cls, (None, 0), f"task {name!r}", "(config, seed)")
    return cls


def task_section(value) -> TaskConfig:
    """A role map's ``task: {name: ..., <the task's own options>}``, validated by that task's Config."""
    from roles.sections.base import field_error

    if not isinstance(value, dict):
        raise ValueError(f"a mapping with the task's name and options, got {type(value).__name__}")
    if "name" not in value:
        raise field_error(
            ("name",),
            f"required but missing (a built-in task: {', '.join(sorted(TASKS))}; or package.module:Class)",
            value,
        )
    name = value["name"]
    if not isinstance(name, str):
        raise field_error(("name",), f"a task name is a string, got {name!r}", name)
    try:
        cls = task_class(name)
    except plugins.PluginError as e:
        raise field_error(("name",), str(e), name) from None
    return cls.Config.model_validate(value)


def build_task(config: TaskConfig, seed: int = 0) -> Task:
    """The task a role map's (validated) ``task`` section describes."""
    return task_class(config.name)(config, seed)


__all__ = ["Example", "Task", "TaskConfig", "TaskDataError", "TASKS", "task_class", "task_section", "build_task"]
