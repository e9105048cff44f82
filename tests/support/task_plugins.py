"""A user task for the tests, referenced as ``support.task_plugins:Countdown`` (it is on PYTHONPATH)."""

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


class HugeId(Countdown):
    """One training example whose id does not fit in the 64 bits a message carries."""

    def __init__(self, config, seed=0):
        super().__init__(config, seed)
        self._splits["train"] = [*self._splits["train"][:-1], Example(id=2**70, prompt="1", answer="0")]


class StrIds(Countdown):
    """Ids that are strings: the task itself works, the messages cannot carry them."""

    def __init__(self, config, seed=0):
        super().__init__(config, seed)
        self._splits = {
            s: [Example(id=str(e.id), prompt=e.prompt, answer=e.answer) for e in xs] for s, xs in self._splits.items()
        }


class NumpyIds(Countdown):
    """numpy integer ids (from a parquet column, say): the codec sends them as ints."""

    def __init__(self, config, seed=0):
        import numpy as np

        super().__init__(config, seed)
        self._splits = {
            s: [Example(id=np.int64(e.id), prompt=e.prompt, answer=e.answer) for e in xs]
            for s, xs in self._splits.items()
        }


class UnpicklableMetadata(Countdown):
    """Eval example 11 carries a generator in its metadata, which the reward ranks cannot send
    to their scoring processes."""

    def __init__(self, config, seed=0):
        super().__init__(config, seed)
        evals = list(self._splits["eval"])
        evals[1] = Example(id=evals[1].id, prompt="x", answer="y", metadata={"ok": 1, "steps": (i for i in range(3))})
        self._splits["eval"] = evals
