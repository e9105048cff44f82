"""Synthetic grade-school word problems in GSM8K's format, for the CPU GSM8K demo.

Each row has GSM8K's two columns: ``question`` (a templated one- or two-step story with
varied names, objects and verbs: buying more, giving away, groups of things, "more than"
comparisons) and ``answer`` (one short line of reasoning per step with its arithmetic
written out, ``a + b = c``, then ``#### N``). Real GSM8K also writes calculator annotations
(``<<a+b=c>>``); they are left out, as in many cleaned copies, to keep responses short enough
for a tiny model. Numbers stay small for the same reason.

Rows are a pure function of the config (seeded), so the same files come out every time, and
no question of the test split also appears in the training split. Knows nothing about
tokenizers, models or mpirl's tasks: it writes files that ``roles.tasks.gsm8k`` reads like
the real dataset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

NAMES = (
    ("Mia", "she"),
    ("Leo", "he"),
    ("Ava", "she"),
    ("Sam", "he"),
    ("Zoe", "she"),
    ("Max", "he"),
    ("Lily", "she"),
    ("Ben", "he"),
    ("Emma", "she"),
    ("Noah", "he"),
    ("Ruby", "she"),
    ("Omar", "he"),
    ("Nora", "she"),
    ("Jack", "he"),
    ("Ella", "she"),
    ("Ivan", "he"),
    ("Rosa", "she"),
    ("Tom", "he"),
    ("Anna", "she"),
    ("Luis", "he"),
)
OBJECTS = (
    "apples",
    "pencils",
    "marbles",
    "stickers",
    "cookies",
    "books",
    "cards",
    "shells",
    "balloons",
    "stamps",
    "crayons",
    "oranges",
    "coins",
    "beads",
    "flowers",
    "toy cars",
)
CONTAINERS = ("bags", "boxes", "packs", "jars", "baskets")  # holders of equal groups
GAIN_VERBS = ("buys", "finds", "gets", "wins", "collects", "is given")  # "<name> buys 5 more <objects>"
LOSS_VERBS = ("gives away", "loses", "sells", "uses")  # "<name> loses 3 <objects>"


@dataclass(frozen=True)
class ProblemConfig:
    train: int = 2000  # problems in the training split
    test: int = 500  # problems in the held-out split (questions never seen in training)
    # Largest starting count and largest number added (smallest 1); a number taken away is
    # always less than the count, so no answer is 0 or negative. Small numbers keep the sums
    # within what a tiny model partly learns in a short warm start.
    max_number: int = 10
    max_factor: int = 9  # largest factor of a product (smallest is 2): single-digit tables
    two_step_share: float = 0.5  # share of problems that take two steps rather than one
    seed: int = 0  # the same seed writes the same rows


class _Writer:
    """Draws one problem at a time from a seeded generator."""

    def __init__(self, config: ProblemConfig):
        self.cfg = config
        self.rng = np.random.default_rng(config.seed)

    def _pick(self, options):
        return options[self.rng.integers(len(options))]

    def _number(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high + 1))

    def problem(self) -> dict[str, str]:
        name, they = self._pick(NAMES)
        friend = self._pick([n for n, _ in NAMES if n != name])
        obj = self._pick(OBJECTS)
        # The kinds' shares are fixed: every kind shows up often enough in a few thousand rows
        # for the model to learn its solution's shape.
        if self.rng.random() < self.cfg.two_step_share:
            if self.rng.random() < 0.25:
                return self._together(name, friend, obj)
            # Two steps: groups then a change, or a count then two changes.
            groups, changes = (True, 1) if self.rng.random() < 0.5 else (False, 2)
        else:
            groups, changes = (True, 0) if self.rng.random() < 0.25 else (False, 1)

        if groups:
            a, b = self._number(2, self.cfg.max_factor), self._number(2, self.cfg.max_factor)
            box = self._pick(CONTAINERS)
            sentences = [f"{name} has {a} {box} of {obj} with {b} {obj} in each."]
            lines, n = [f"{name} has {a} * {b} = {a * b} {obj}."], a * b
        else:
            n = self._number(1, self.cfg.max_number)
            sentences, lines = [f"{name} has {n} {obj}."], []
        left = False
        for i in range(changes):
            who = they.capitalize() if i == 0 else f"Then {they}"
            # Taking away needs something to take and leaves at least one: no "0 left" answers.
            if self.rng.random() < 0.5 or n < 2:
                b = self._number(1, self.cfg.max_number)
                sentences.append(f"{who} {self._pick(GAIN_VERBS)} {b} more {obj}.")
                lines.append(f"{name} has {n} + {b} = {n + b} {obj}.")
                n, left = n + b, False
            else:
                b = self._number(1, n - 1)
                if self.rng.random() < 0.5:
                    sentences.append(f"{who} gives {b} {obj} to {friend}.")
                else:
                    sentences.append(f"{who} {self._pick(LOSS_VERBS)} {b} {obj}.")
                lines.append(f"{name} has {n} - {b} = {n - b} {obj} left.")
                n, left = n - b, True
        ask = f"How many {obj} does {name} have {'left' if left else 'now'}?"
        return _row([*sentences, ask], lines, n)

    def _together(self, name: str, friend: str, obj: str) -> dict[str, str]:
        a, b = self._number(1, self.cfg.max_number), self._number(1, self.cfg.max_number)
        sentences = [
            f"{name} has {a} {obj}.",
            f"{friend} has {b} more {obj} than {name}.",
            f"How many {obj} do {name} and {friend} have together?",
        ]
        lines = [f"{friend} has {a} + {b} = {a + b} {obj}.", f"Together they have {a} + {a + b} = {a + a + b} {obj}."]
        return _row(sentences, lines, a + a + b)


def _row(sentences: list[str], lines: list[str], result: int) -> dict[str, str]:
    return {"question": " ".join(sentences), "answer": "\n".join([*lines, f"#### {result}"])}


def generate(config: ProblemConfig = ProblemConfig()) -> dict[str, list[dict[str, str]]]:
    """``{"train": rows, "test": rows}``; each row is ``{"question": ..., "answer": ...}``."""
    writer = _Writer(config)
    want = config.train + config.test
    rows: dict[str, dict[str, str]] = {}  # question -> row: a question drawn twice is kept once
    # A small config's space of distinct questions may be smaller than asked for: stop drawing
    # rather than loop forever, and say so.
    for _ in range(50 * want):
        row = writer.problem()
        rows.setdefault(row["question"], row)
        if len(rows) == want:
            break
    else:
        raise ValueError(f"only {len(rows)} distinct questions for {want} asked: raise max_number")
    ordered = list(rows.values())
    # Distinct questions, so the held-out split shares no question with the training split.
    return {"test": ordered[: config.test], "train": ordered[config.test :]}


def write(out_dir: str | Path, config: ProblemConfig = ProblemConfig()) -> dict[str, Path]:
    """Write ``train``/``test`` as ``.parquet`` and ``.jsonl`` in ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in generate(config).items():
        pq.write_table(pa.Table.from_pylist(rows), out / f"{split}.parquet")
        with open(out / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        paths[f"{split}.parquet"] = out / f"{split}.parquet"
        paths[f"{split}.jsonl"] = out / f"{split}.jsonl"
    return paths
