"""The tool demo's task (AdditionTask) and reward (FinalAnswer), as a role map names them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from examples.tools.task import AdditionTask, FinalAnswer, draw_pairs
from roles.rewards import build_reward
from roles.tasks import task_class, task_section

pytestmark = pytest.mark.timeout(60)


def make(seed: int = 0, **options) -> AdditionTask:
    return AdditionTask(AdditionTask.Config.model_validate(options), seed)


def test_found_by_its_plugin_path_with_its_options():
    cfg = task_section({"name": "examples.tools.task:AdditionTask", "min_digits": 3, "train_size": 50})
    assert task_class(cfg.name) is AdditionTask
    assert (cfg.min_digits, cfg.max_digits, cfg.train_size) == (3, 4, 50)


def test_splits_are_distinct_pairs_of_the_asked_widths_and_repeat_by_seed():
    task = make(seed=3, min_digits=3, max_digits=4, train_size=300, eval_size=50)
    train, held = task.examples("train"), task.examples("eval")
    assert (len(train), len(held)) == (300, 50)
    pairs = [(ex.metadata["a"], ex.metadata["b"]) for ex in (*train, *held)]
    assert len(set(pairs)) == len(pairs)  # no held-out pair was trained on
    assert all(3 <= len(str(n)) <= 4 for pair in pairs for n in pair)
    assert {len(str(a)) for a, _ in pairs} == {3, 4}  # both widths drawn
    task.check_ids()  # ids unique across both splits
    again = make(seed=3, min_digits=3, max_digits=4, train_size=300, eval_size=50)
    assert [e.prompt for e in again.examples("eval")] == [e.prompt for e in held]
    other = make(seed=4, min_digits=3, max_digits=4, train_size=300, eval_size=50)
    assert [e.prompt for e in other.examples("eval")] != [e.prompt for e in held]


def test_prompt_and_answer():
    ex = make(train_size=5, eval_size=5).examples("train")[0]
    a, b = ex.metadata["a"], ex.metadata["b"]
    assert ex.prompt == f"What is {a}+{b}?"
    assert ex.answer == str(a + b)


def test_bad_options_name_the_field():
    with pytest.raises(ValidationError, match="min_digits"):
        AdditionTask.Config(min_digits=5, max_digits=4)
    with pytest.raises(ValueError, match="distinct pairs"):
        draw_pairs(100, 1, 1, seed=0)  # only 100 one-digit pairs exist


def test_final_answer_checks_the_final_turn_text():
    ex = make(train_size=5, eval_size=5).examples("eval")[0]
    reward = build_reward("examples.tools.task:FinalAnswer")
    assert isinstance(reward, FinalAnswer)
    right = ex.answer
    assert reward(right, ex) == {"score": 1.0, "correct": 1.0}
    assert reward(f"  {right}\n", ex)["correct"] == 1.0  # spaces around are fine
    assert reward(f"{right}<|im_end|>", ex)["correct"] == 1.0  # decoded with its end marker
    wrong = str(int(right) + 1)
    for response in (wrong, f"{right}0", f"The answer is {right}", "", f"<tool_call>{right}</tool_call>"):
        assert reward(response, ex) == {"score": 0.0, "correct": 0.0}, response


def test_default_reward_is_final_answer():
    assert build_reward(AdditionTask.default_reward).__class__ is FinalAnswer
