"""MATH-style problems: a ``problem``, and a reference from ``answer`` or from ``solution``.

The reference is the row's ``answer`` when the file has that column and the row's value is
not empty; otherwise it is the last ``\\boxed{...}`` of its ``solution`` (read by the
``math_verify`` reward's own rule, so the two cannot disagree). The prompt is the problem
followed by an instruction to box the final answer. ``level``, ``type`` and ``subject``
columns, and the solution, go to metadata when present. Column names are options; reading
files, ids and splits are :mod:`roles.tasks.file_task`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from roles.tasks import files
from roles.tasks.base import Example
from roles.tasks.file_task import FileTask, FileTaskConfig, text_cell

# Columns copied to metadata when a file has them (MATH has level and type; MATH-500 subject).
METADATA_COLUMNS = ("level", "type", "subject")


class MathConfig(FileTaskConfig):
    name: str = "math"
    problem_key: str = "problem"  # the column of problem texts
    answer_key: str = "answer"  # the column of final answers; wins over the solution's box
    solution_key: str = "solution"  # the column of worked solutions ending in \boxed{...}
    # Appended to each problem after a space; "": none.
    instruction: str = r"Please reason step by step, and put your final answer within \boxed{}."


class MathTask(FileTask):
    Config = MathConfig
    config: MathConfig
    default_reward = "math_verify"

    def __init__(self, config: MathConfig, seed: int = 0):
        self._last_boxed: Callable[[str], str | None] | None = None
        super().__init__(config, seed)

    def columns_for(self) -> tuple[list[str], list[str]]:
        c = self.config
        return [c.problem_key], [c.answer_key, c.solution_key, *METADATA_COLUMNS]

    def check_columns(self, rows: files.FileRows) -> None:
        c = self.config
        if c.answer_key not in rows.columns and c.solution_key not in rows.columns:
            raise rows.error(files.no_column([c.answer_key, c.solution_key], rows.columns))

    def make_example(self, example_id: int, row: Mapping[str, Any]) -> Example | str:
        c = self.config
        problem = text_cell(row, c.problem_key)
        if problem is None:
            return f"an empty {c.problem_key!r}"
        # Numeric answers (AIME-like files store integers) are references as written.
        answer = text_cell(row, c.answer_key, numbers=True)
        solution = text_cell(row, c.solution_key)
        if answer is None and solution is not None:
            answer = self._boxed(solution)
        if not answer:
            return f"no {c.answer_key!r} and no \\boxed{{}} in {c.solution_key!r}"
        metadata = {k: row[k] for k in METADATA_COLUMNS if row.get(k) is not None}
        if solution is not None:
            metadata["solution"] = solution
        prompt = f"{problem} {c.instruction}" if c.instruction else problem
        return Example(example_id, prompt, answer.strip(), metadata)

    def _boxed(self, solution: str) -> str | None:
        if self._last_boxed is None:
            # The reward owns the rule for reading \boxed{}; imported only when a row needs it
            # (and not at module level, so the reward package may import tasks).
            from roles.rewards.math_verify import last_boxed

            self._last_boxed = last_boxed
        return self._last_boxed(solution)
