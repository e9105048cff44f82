"""GSM8K: grade-school word problems whose reference is the number after ``####``.

Rows hold a ``question`` and an ``answer`` (the public dataset's format: the worked solution,
then ``#### 72``); the column names are options. The prompt is the question followed by an
instruction to end with ``#### <number>``, the reference answer is that final number
(commas stripped, by the ``gsm8k`` reward's own rule, so the two cannot disagree), and the
full solution goes to metadata. A row whose answer has no ``####``, or no number the reward
can read after it, is skipped and counted. Reading files, ids and splits are :mod:`roles.tasks.file_task`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.tasks.base import Example
from roles.tasks.file_task import FileTask, FileTaskConfig, text_cell


class GSM8KConfig(FileTaskConfig):
    name: str = "gsm8k"
    question_key: str = "question"  # the column of problem texts
    answer_key: str = "answer"  # the column of worked solutions ending in '#### <number>'
    # Appended to each question after a space (verl's wording, so scores compare); "": none.
    instruction: str = 'Let\'s think step by step and output the final answer after "####".'


class GSM8KTask(FileTask):
    Config = GSM8KConfig
    config: GSM8KConfig
    default_reward = "gsm8k"

    def __init__(self, config: GSM8KConfig, seed: int = 0):
        # The reward owns the rule for reading '####'; imported here, not at module level,
        # so that the reward package may import tasks without a cycle.
        from roles.rewards.gsm8k import normalize_number, reference_answer

        self._reference, self._number = reference_answer, normalize_number
        super().__init__(config, seed)

    def columns_for(self) -> tuple[list[str], list[str]]:
        return [self.config.question_key, self.config.answer_key], []

    def make_example(self, example_id: int, row: Mapping[str, Any]) -> Example | str:
        q_key, a_key = self.config.question_key, self.config.answer_key
        question, solution = text_cell(row, q_key), text_cell(row, a_key)
        if question is None:
            return f"an empty {q_key!r}"
        if solution is None:
            return f"an empty {a_key!r}"
        try:
            reference = self._reference(solution)
        except ValueError:
            return f"no '#### <answer>' in {a_key!r}"
        # The reward cannot score against "#### seven": such a row could only ever score 0.
        if self._number(reference) is None:
            return f"a '#### <answer>' in {a_key!r} that is not a number"
        instruction = self.config.instruction
        prompt = f"{question} {instruction}" if instruction else question
        return Example(example_id, prompt, reference, {"solution": solution})
