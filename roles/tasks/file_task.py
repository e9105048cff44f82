"""What every task backed by local data files shares: its config, its ids, its splits.

A :class:`FileTask` reads its ``train_files`` (and ``eval_files``) with
:mod:`roles.tasks.files`, turns each row into an :class:`~roles.tasks.base.Example` through
its subclass's :meth:`FileTask.make_example`, skips and counts unusable rows, and makes the
eval split. It knows nothing of any dataset's columns or answers (the subclasses do) and does
no per-epoch shuffling (the controller does, from the run seed).

Ids: every row of every file gets one, in reading order: ``train_files`` then ``eval_files``,
each file's rows in file order, counting unusable rows too. So an id always points at one
row of one file, and the same files give the same ids on every rank, whatever the split,
``max_examples`` or the skipping rules. The eval split cut by ``eval_fraction`` is a pure
function of the usable rows and the seed, so every rank makes the same one without talking.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import AfterValidator, Field, field_validator, model_validator

from roles import hub_cache
from roles.tasks import files
from roles.tasks.base import Example, Task, TaskConfig, TaskDataError


class BadRow(ValueError):
    """A row that is malformed (a wrong type, a broken chat message), not merely empty;
    :class:`FileTask` adds the field, file and row to the message."""


def _checked_path(path: str) -> str:
    files.check_path(path)  # a TaskDataError is a ValueError: pydantic names the field
    return path


DataPath = Annotated[str, AfterValidator(_checked_path)]


def _hub_files(i: int, item: Any) -> list[Any]:
    """Item ``i`` of a files field: a ``hf://datasets/...`` URI becomes the cached files it
    names (roles.hub_cache); anything else stays, for the item's own checks."""
    if not isinstance(item, str):
        return [item]
    try:
        return hub_cache.data_files(item)
    except ValueError as e:
        raise ValueError(f"[{i}] {e}") from None


class FileTaskConfig(TaskConfig):
    """Options of tasks read from local files (relative paths are taken from the directory
    the job starts in). Formats: .jsonl, .json, .parquet, or a ``save_to_disk`` folder. A file
    may be named on the Hub, ``hf://datasets/owner/name[@revision]/<path or pattern>``: the
    files of the dataset's cached snapshot it matches, in path order (``roles.hub_cache``)."""

    # The train split's files, read in this order (a single path means a list of one).
    train_files: list[DataPath] = Field(min_length=1)
    eval_files: list[DataPath] = []  # the eval split's files; none: see eval_fraction
    # With no eval_files: the share of usable train rows held out as the eval split (drawn
    # with split_seed). 0: no eval split. Giving both this and eval_files is an error.
    eval_fraction: float = Field(0.0, ge=0, lt=1)
    # Seeds the eval_fraction split. None: the run seed. Fix it to compare runs of several
    # seeds on the same held-out rows.
    split_seed: int | None = Field(None, ge=0)
    # Keep only the first this many train examples (in id order), after the eval split, so
    # the eval split does not change with it. None: all of them.
    max_examples: int | None = Field(None, gt=0)

    @field_validator("train_files", "eval_files", mode="before")
    @classmethod
    def _one_path(cls, v: Any) -> Any:
        v = [v] if isinstance(v, str) else v
        if not isinstance(v, list):
            return v  # pydantic says what the field wants
        return [f for i, item in enumerate(v) for f in _hub_files(i, item)]

    @model_validator(mode="after")
    def _one_eval_source(self) -> FileTaskConfig:
        if self.eval_files and self.eval_fraction:
            raise ValueError(
                f"eval_files and eval_fraction ({self.eval_fraction}) are two ways "
                "to make the eval split: give one of them"
            )
        # Each file, links resolved -> its first place in the field.
        places: dict[str, dict[Path, int]] = {}
        for name in ("train_files", "eval_files"):
            # Listed twice (or through a link), a file's rows would be read twice: each a
            # separate example, so trained on twice as often as the others, silently.
            seen = places[name] = {}
            for i, p in enumerate(getattr(self, name)):
                j = seen.setdefault(Path(p).resolve(), i)
                if j != i:
                    raise ValueError(f"{name}[{i}] is also {name}[{j}] ({p}): its rows would be read twice")
        train = places["train_files"]
        for path, i in places["eval_files"].items():
            if path in train:
                raise ValueError(
                    f"eval_files[{i}] is also train_files[{train[path]}] "
                    f"({self.eval_files[i]}): the eval rows would be trained on"
                )
        return self


class FileTask(Task):
    """Base of tasks read from files; subclasses give :meth:`columns_for` and
    :meth:`make_example`, and may add :meth:`check_columns`."""

    Config = FileTaskConfig
    config: FileTaskConfig

    def __init__(self, config: FileTaskConfig, seed: int = 0):
        super().__init__(config, seed)
        # Unusable rows skipped, per file: {"task.train_files[0]": {"an empty 'question'": 3}}.
        self.skipped: dict[str, dict[str, int]] = {}
        train, next_id = self._read("train_files", config.train_files, first_id=0)
        if config.eval_files:
            eval_, _ = self._read("eval_files", config.eval_files, first_id=next_id)
        else:
            train, eval_ = self._split(train)
        if config.max_examples is not None:
            train = train[: config.max_examples]
        self._splits = {"train": tuple(train), "eval": tuple(eval_)}

    # ------------------------------------------------------------------ for subclasses

    def columns_for(self) -> tuple[list[str], list[str]]:
        """The columns every file must have, and those read when a file has them."""
        raise NotImplementedError

    def check_columns(self, rows: files.FileRows) -> None:
        """Checks of a file's columns beyond presence (e.g. one of two columns); raise
        ``rows.error(...)``."""

    def make_example(self, example_id: int, row: Mapping[str, Any]) -> Example | str:
        """The example of one row, or a short reason (``"an empty 'question'"``) why the row
        is unusable: it is then skipped and counted. Raise :class:`BadRow` for a malformed row."""
        raise NotImplementedError

    # ------------------------------------------------------------------ reading and splitting

    def _read(self, key: str, paths: list[str], first_id: int) -> tuple[list[Example], int]:
        required, optional = self.columns_for()
        examples: list[Example] = []
        next_id = first_id
        for i, path in enumerate(paths):
            rows = files.read_rows(path, f"task.{key}[{i}]", required, optional)
            self.check_columns(rows)
            usable, reasons = self._examples(rows, next_id)
            if not usable:
                why = "; ".join(f"{n} with {r}" for r, n in reasons.most_common())
                n = len(rows.rows)
                raise rows.error(
                    f"no usable rows ({n} row{'s' if n != 1 else ''}: {why})"
                    if why
                    else "no usable rows (the file has no rows)"
                )
            self.skipped[rows.field] = dict(reasons)
            examples += usable
            next_id += len(rows.rows)
        return examples, next_id

    def _examples(self, rows: files.FileRows, first_id: int) -> tuple[list[Example], Counter]:
        usable, reasons = [], Counter()
        for j, row in enumerate(rows.rows):
            try:
                made = self.make_example(first_id + j, row)
            except BadRow as e:
                raise rows.error(f"{rows.where(j)}: {e}") from None
            if isinstance(made, str):
                reasons[made] += 1
            else:
                usable.append(made)
        return usable, reasons

    def _split(self, rows: list[Example]) -> tuple[list[Example], list[Example]]:
        fraction = self.config.eval_fraction
        if not fraction:
            return rows, []
        n_eval = int(round(fraction * len(rows)))
        if not 0 < n_eval < len(rows):
            raise TaskDataError(
                f"task.eval_fraction: {fraction} of {len(rows)} usable train rows "
                f"leaves {n_eval} for eval and {len(rows) - n_eval} for training; "
                "both need at least one"
            )
        seed = self.seed if self.config.split_seed is None else self.config.split_seed
        held = set(np.random.default_rng(seed).permutation(len(rows))[:n_eval].tolist())
        # Both splits stay in id order; the draw decides only membership.
        train = [ex for k, ex in enumerate(rows) if k not in held]
        eval_ = [ex for k, ex in enumerate(rows) if k in held]
        return train, eval_


# ---------------------------------------------------------------------- reading cells


def text_cell(row: Mapping[str, Any], key: str, numbers: bool = False) -> str | None:
    """The string in column ``key``; None when missing, null or blank (an unusable row).
    ``numbers``: a number (a numeric answer column) is taken as its decimal text."""
    value = row.get(key)
    # NaN is pandas' missing value: a column written from a DataFrame holds it for a gap.
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if numbers and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if numbers and isinstance(value, float) and math.isfinite(value):
        # pandas stores an integer column that has gaps as floats: 72.0 is the answer 72.
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        want = "a string or a number" if numbers else "a string"
        raise BadRow(f"{key!r} is {describe(value)}, expected {want}")
    check_text(value, repr(key))
    return value if value.strip() else None


def check_text(value: str, what: str) -> None:
    """Refuse a string no tokenizer can encode: JSON's ``\\ud800`` escapes decode to lone
    surrogates, which are not Unicode text (the tokenizer failed on them with a TypeError)."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadRow(
            f"{what} holds a lone surrogate (U+{ord(value[e.start]):04X}) at character {e.start}: "
            "not valid Unicode text (an escape such as \\ud800 in JSON, without its pair)"
        ) from None


def describe(value: Any) -> str:
    """A cell's value for a message: ``an integer (12)``."""
    names = {bool: "a boolean", int: "an integer", float: "a number", list: "a list", dict: "a mapping", bytes: "bytes"}
    return f"{names.get(type(value), 'a ' + type(value).__name__)} ({value!r:.40})"
