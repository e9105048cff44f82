"""A user task for the tests, referenced as ``task_plugins:Countdown`` (it is on PYTHONPATH)."""

from pydantic import Field

from roles.tasks.base import Example, Task, TaskConfig


class Countdown(Task):
    """Prompts "n" with answer "n-1": a task outside mpirl with options of its own."""

    class Config(TaskConfig):
        size: int = Field(10, gt=0)  # examples in the train split (the eval split has 3)

    default_reward = "exact"

    def __init__(self, config, seed=0):
        super().__init__(config, seed)
        rows = [Example(id=i, prompt=str(i), answer=str(i - 1)) for i in range(config.size + 3)]
        self._splits = {"train": rows[: config.size], "eval": rows[config.size :]}


class NotATask:
    pass


class InitTakesOnlyConfig(Task):
    def __init__(self, config):
        super().__init__(config)


class BadConfig(Task):
    Config = dict


class RaisesInInit(Task):
    """A task whose data loading fails the way user code does: a plain exception."""

    def __init__(self, config, seed=0):
        super().__init__(config, seed)
        raise KeyError("question")


class RepeatsIds(Countdown):
    """Its eval examples reuse train ids 0 and 1: a prompt would be scored against another answer."""

    def __init__(self, config, seed=0):
        super().__init__(config, seed)
        train = self._splits["train"]
        self._splits["eval"] = [Example(id=i, prompt="x", answer="y") for i in (0, 1)] + list(train[2:3])
