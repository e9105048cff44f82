"""The math_verify reward (equivalence by Hugging Face math_verify) and ``last_boxed``."""

from __future__ import annotations

import subprocess
import sys
import threading

import pydantic
import pytest

from roles.rewards import build_reward
from roles.rewards.math_verify import MathVerifyReward, gold_text, last_boxed
from roles.tasks.base import Example
from support.paths import REPO

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def reward():
    return MathVerifyReward()


def ex(answer: str) -> Example:
    return Example(id=3, prompt="Solve.", answer=answer)


# (reference, response, equivalent?)
CASES = [
    ("0.5", "So the answer is $\\boxed{\\frac{1}{2}}$.", True),
    ("\\frac{1}{2}", "The answer is \\boxed{0.5}", True),
    ("\\frac{1}{2}", "Thus $\\boxed{\\dfrac{1}{2}}$", True),
    ("\\frac{1}{2}", "Thus $\\boxed{\\tfrac12}$", True),
    ("\\frac{\\sqrt2}{2}", "\\boxed{\\sqrt{2}/2}", True),
    ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\frac{1}{\\sqrt{2}}}", True),
    ("[1,2)", "The solution set is \\boxed{[1,2)}.", True),
    ("[1,2)", "The solution set is \\boxed{(1,2)}.", False),
    ("(-\\infty, 3]", "\\boxed{(-\\infty,3]}", True),
    ("(-\\infty, 3]", "\\boxed{(-\\infty,3)}", False),
    ("3", "so \\boxed{x=3}", True),
    ("x=3", "so \\boxed{3}", True),
    ("30^\\circ", "The angle is \\boxed{30}.", True),
    ("30", "The angle is \\boxed{30^\\circ}.", True),
    ("50\\%", "\\boxed{50}", True),
    ("50\\%", "\\boxed{0.5}", True),
    ("\\{1,2\\}", "\\boxed{\\{2,1\\}}", True),
    ("1,2,3", "\\boxed{3, 2, 1}", True),
    ("(1,2)", "\\boxed{(2,1)}", False),
    ("3", "\\boxed{4}", False),
    ("-7", "\\boxed{-7}", True),
    ("-7", "\\boxed{7}", False),
    ("\\frac{1}{2}", "$\\boxed{\\frac{1}{3}}$", False),
    ("2\\pi", "\\boxed{2\\pi}", True),
    ("2\\pi", "\\boxed{6.283185}", True),
    ("2\\pi", "\\boxed{6.28}", False),
    ("x^2+2x+1", "Expanding, \\boxed{(x+1)^2}", True),
    ("1+\\sqrt{3}", "\\boxed{\\sqrt{3}+1}", True),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", True),
    ("\\text{(C)}", "The answer is \\boxed{C}", True),
    ("\\$18.90", "She paid \\boxed{18.90} dollars", True),
    ("18.90", "She paid \\boxed{\\$18.9}", True),
    ("10", "\\fbox{10}", True),
    ("3", "The answer is 3.", True),  # no box: math_verify reads the last expression
    ("3", "I am not sure.", False),  # nothing to read
    # The last box counts, unless boxes sit close together: math_verify reads those as a set.
    (
        "5",
        "I first got \\boxed{3}. Checking the second case again carefully, I see my mistake "
        "and the answer is \\boxed{5}.",
        True,
    ),
    ("5", "\\boxed{3} or \\boxed{5}", False),
    ("2, 3", "so \\boxed{2} and \\boxed{3}", True),
    ("\\frac{3}{4}", "the final answer is 3/4", True),
    ("0.75", "Final Answer: $\\frac34$", True),
]


@pytest.mark.parametrize("gold,response,want", CASES)
def test_equivalence(reward, gold, response, want):
    got = reward(response, ex(gold))
    assert got == {"score": float(want), "correct": float(want)}


def test_reference_is_boxed_unless_it_has_delimiters():
    assert gold_text("\\frac{1}{2}") == "\\boxed{\\frac{1}{2}}"
    assert gold_text(" 0.5 ") == "\\boxed{0.5}"
    assert gold_text("\\$18.90") == "\\boxed{\\$18.90}"  # an escaped dollar is not a delimiter
    assert gold_text("$\\frac{1}{2}$") == "$\\frac{1}{2}$"
    assert gold_text("\\boxed{2}") == "\\boxed{2}"


def test_an_unparseable_reference_raises(reward):
    with pytest.raises(ValueError, match="cannot parse the reference"):
        reward("\\boxed{1}", ex(""))


def test_runs_off_the_main_thread(reward):
    # math_verify's own SIGALRM limits would raise here; ours are off (the sandbox limits).
    out = {}
    t = threading.Thread(target=lambda: out.update(r=reward("\\boxed{0.5}", ex("\\frac12"))))
    t.start()
    t.join(60)
    assert out["r"]["correct"] == 1.0


def test_options():
    loose = build_reward("math_verify", {"float_rounding": 2})
    assert loose("\\boxed{3.14}", ex("\\pi"))["correct"] == 1.0
    assert build_reward("math_verify", {})("\\boxed{3.14}", ex("\\pi"))["correct"] == 0.0
    lax = build_reward("math_verify", {"strict": False})
    assert lax("\\boxed{y=3}", ex("x=3"))["correct"] == 1.0  # variables matched by position
    assert build_reward("math_verify", {})("\\boxed{y=3}", ex("x=3"))["correct"] == 0.0
    with pytest.raises(pydantic.ValidationError, match="float_rounding"):
        build_reward("math_verify", {"float_rounding": -1})
    with pytest.raises(pydantic.ValidationError, match="strict"):
        build_reward("math_verify", {"strict": "yes"})


LAST_BOXED = [
    ("The answer is \\boxed{5}.", "5"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("first \\boxed{1}, then \\boxed{\\frac{\\sqrt{3}}{2}} at last", "\\frac{\\sqrt{3}}{2}"),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
    ("\\boxed{\\left\\{ x \\right.}", "\\left\\{ x \\right."),  # escaped braces do not count
    ("\\fbox{7}", "7"),
    ("\\boxed{1} and \\fbox{2}", "2"),
    ("\\boxed { 3 }", "3"),
    ("$\\boxed 5$", "5"),
    ("\\boxed{a^{2}+b^{2}}", "a^{2}+b^{2}"),
    ("no box here", None),
    ("cut off: \\boxed{\\frac{1}{", None),
    ("\\boxedin{3}", None),
]


@pytest.mark.parametrize("text,want", LAST_BOXED)
def test_last_boxed(text, want):
    assert last_boxed(text) == want


def test_importing_the_module_does_not_import_math_verify():
    code = (
        "import sys; import roles.rewards.math_verify as m; "
        "assert m.last_boxed('\\\\boxed{1}') == '1'; "
        "assert 'math_verify' not in sys.modules and 'sympy' not in sys.modules, 'heavy import'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )
    assert done.returncode == 0, done.stderr
