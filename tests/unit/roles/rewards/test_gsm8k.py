"""The GSM8K reward: answer extraction, number normalisation, reference answers, scoring."""

from __future__ import annotations

import pydantic
import pytest

from roles.rewards import build_reward
from roles.rewards.gsm8k import GSM8KReward, extract_answer, normalize_number, reference_answer
from roles.tasks.base import Example

pytestmark = pytest.mark.timeout(60)

NATALIA = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)
WENG = (
    "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\n"
    "Working 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"
)
BIG = (
    "The house cost 80,000 + 50,000 = $<<80000+50000=130000>>130,000 in total.\n"
    "So he made a profit of 200,000 - 130,000 = $<<200000-130000=70000>>70,000.\n#### 70,000"
)

# (response, fallback, extracted answer)
EXTRACT = [
    ("She sells 16 - 3 - 4 = 9 eggs, so she makes 9 * 2 = 18 dollars.\n#### 18", "last_number", "18"),
    ("Step 1: 3 + 4 = 7. Step 2: 7 * 2 = 14.\n#### 14", "none", "14"),
    ("In total 1,000 + 234 = 1,234 people came.\n#### 1,234", "last_number", "1234"),
    ("The total is $18.00.\n#### $18.00", "none", "18"),
    ("The temperature dropped to -7 degrees.\n#### -7", "none", "-7"),
    ("Half of one is 0.5\n#### .5", "none", "0.5"),
    ("Each costs 0.50 dollars.\n#### 0.50", "none", "0.5"),
    ("So she pays 18 dollars.", "last_number", "18"),
    ("So the answer is 42.", "last_number", "42"),
    ("#### 72.", "none", "72"),
    ("First I got\n#### 5\nbut that is wrong, recount: 3 + 4 = 7\n#### 7", "none", "7"),
    ("#### 5 apples, since 2 + 3 = 5 and she ate 1", "none", "5"),
    ("No marker here, 2 + 3 = 5, then 5 * 4 = 20 in all", "last_number", "20"),
    ("No marker here, 2 + 3 = 5, then 5 * 4 = 20 in all", "none", None),
    ("I do not know the answer.", "last_number", None),
    ("", "none", None),
    ("#### +12", "none", "12"),
    ("The discount is 25%.\n#### 25%", "none", "25"),
    ("He walks 5-7 miles a day, so about 6.\n", "last_number", "6"),
    ("The change is 3 - 10 = -7", "last_number", "-7"),
    ("She gets 3/4 of the pie.\n#### 3/4", "none", "0.75"),
    ("A third: 1/3", "last_number", "1/3"),
    ("#### 1,000,000", "none", "1000000"),
    ("The answer is 18.5 and #### 18.50", "none", "18.5"),
    ("#### 2.500", "none", "2.5"),
    ("He had 3 bags.\n####\n(no number after the marker) he has 12 apples", "none", "12"),
    ("####\n", "last_number", None),
    ("He had \u22125 points, so\n#### \u22125", "none", "-5"),
    ("It took 2 hours, i.e. 120 minutes.\n#### 120 minutes", "none", "120"),
    ("Tom has 3,5,7 marbles in three jars", "last_number", "7"),
]


@pytest.mark.parametrize("text,fallback,want", EXTRACT)
def test_extract_answer(text, fallback, want):
    assert extract_answer(text, fallback=fallback) == want


NORMALIZE = [
    (" $1,234.00 ", "1234"),
    ("18.50", "18.5"),
    ("18.0", "18"),
    ("0.5", "0.5"),
    (".5", "0.5"),
    ("-7", "-7"),
    ("+5", "5"),
    ("72.", "72"),
    ("50%", "50"),
    ("1/2", "0.5"),
    ("1/3", "1/3"),
    ("-0.25", "-0.25"),
    ("007", "7"),
    ("18 dollars", None),
    ("seven", None),
    ("1/0", None),
    ("", None),
]


@pytest.mark.parametrize("text,want", NORMALIZE)
def test_normalize_number(text, want):
    assert normalize_number(text) == want


def test_reference_answer_on_gsm8k_answer_fields():
    assert reference_answer(NATALIA) == "72"
    assert reference_answer(WENG) == "10"
    assert reference_answer(BIG) == "70000"
    assert reference_answer("Reasoning.\n#### -3") == "-3"
    assert reference_answer("#### 1,234\n") == "1234"
    with pytest.raises(ValueError, match="#### <answer>"):
        reference_answer("Natalia sold 72 clips.")
    with pytest.raises(ValueError, match="#### <answer>"):
        reference_answer("Natalia sold 72 clips.\n####   ")


def ex(answer: str) -> Example:
    return Example(id=7, prompt="How many?", answer=answer)


def test_scores_and_components():
    r = GSM8KReward()
    assert r("so 9 * 2 = 18\n#### 18", ex("18")) == {"score": 1.0, "correct": 1.0, "extracted": 1.0}
    assert r("so 9 * 2 = 18\n#### 19", ex("18")) == {"score": 0.0, "correct": 0.0, "extracted": 1.0}
    assert r("I cannot tell.", ex("18")) == {"score": 0.0, "correct": 0.0, "extracted": 0.0}
    assert r("#### 18.00", ex("18"))["correct"] == 1.0
    assert r("#### $1,234", ex("1,234"))["correct"] == 1.0
    assert r("#### 0.75", ex("3/4"))["correct"] == 1.0
    assert r("#### -3", ex("-3"))["correct"] == 1.0
    assert r("#### 3", ex("-3"))["correct"] == 0.0


def test_reference_may_be_the_whole_answer_field():
    assert GSM8KReward()("... so 72 in all.\n#### 72", ex(NATALIA))["correct"] == 1.0
    assert GSM8KReward()("#### 70000", ex(BIG))["correct"] == 1.0


def test_fallback_none_is_the_strict_format():
    strict = build_reward("gsm8k", {"fallback": "none"})
    assert strict("The answer is 18.", ex("18"))["score"] == 0.0
    assert strict("The answer is 18.", ex("18"))["extracted"] == 0.0
    assert build_reward("gsm8k", {})("The answer is 18.", ex("18"))["score"] == 1.0


def test_correct_and_format_scores():
    r = build_reward("gsm8k", {"correct_score": 2, "format_score": 0.1})
    assert r("#### 18", ex("18"))["score"] == 2.0
    assert r("#### 17", ex("18"))["score"] == pytest.approx(0.1)
    assert r("no number at all", ex("18"))["score"] == 0.0  # no answer: not even the format score


def test_a_reference_that_is_not_a_number_raises():
    with pytest.raises(ValueError, match="example 7: reference answer 'seven' is not a number"):
        GSM8KReward()("#### 7", ex("seven"))


@pytest.mark.parametrize(
    "options,field",
    [
        ({"fallback": "first_number"}, "fallback"),
        ({"correct_score": "1"}, "correct_score"),
        ({"format_scor": 0.1}, "format_scor"),
    ],
)
def test_options_are_checked(options, field):
    with pytest.raises(pydantic.ValidationError, match=field):
        build_reward("gsm8k", options)


def test_extract_answer_rejects_an_unknown_fallback():
    with pytest.raises(ValueError, match="fallback"):
        extract_answer("no marker 5", fallback="first")
