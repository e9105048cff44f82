"""The math_verify reward: is the response's final answer mathematically the reference?

Equivalence is Hugging Face's ``math_verify`` (LaTeX and plain expressions parsed to sympy
and compared), not hand-written rules. The reference is wrapped in ``\\boxed{}`` unless it
carries its own delimiters; the prediction is read the way math_verify does (a box first,
then "final answer is" anchors, then plain expressions). ``\\fbox{}`` counts as a box; of
several boxes the last counts, except that boxes close together read as one set of answers.

math_verify's own time limits use SIGALRM and are switched off: the reward runs in the
sandbox (``roles.rewards.sandbox``), whose process-based limit holds for any code.
``last_boxed`` needs only the standard library (the MATH task imports it); ``math_verify``
is imported when a reward is built, never on importing this module.
"""

from __future__ import annotations

import functools
import re
from typing import Any, ClassVar

from pydantic import Field

from roles.rewards.base import RewardConfig

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` or ``\\fbox{...}`` in ``text``, stripped.

    Braces are balanced (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``) and escaped ones
    (``\\{``) do not count. ``\\boxed 5`` (the MATH dataset's brace-less form) gives the text
    up to the next ``$`` or line end. None when there is no box, or the last one is never
    closed (a truncated response has no final answer).
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    i = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    if i < len(text) and text[i] != "{" and not text[i].isspace():
        return None  # a longer command such as \boxedin, not a box
    rest = text[i:].lstrip(" \t")
    if not rest.startswith("{"):
        loose = re.split(r"[$\n]", rest, maxsplit=1)[0].strip()
        return loose or None
    depth = 0
    j = 0
    while j < len(rest):
        ch = rest[j]
        if ch == "\\":
            j += 2  # an escaped character (\{, \}, \\) never opens or closes the box
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return rest[1:j].strip()
        j += 1
    return None


def gold_text(answer: str) -> str:
    """The reference as math_verify should read it: boxed, unless it has its own delimiters."""
    answer = answer.strip()
    if "\\boxed" in answer or _UNESCAPED_DOLLAR.search(answer):
        return answer
    return f"\\boxed{{{answer}}}"


class MathVerifyReward:
    """1.0 when math_verify finds the response's answer equivalent to ``example.answer``."""

    # Modules the sandbox's process server imports ahead, so a restarted worker is ready at
    # once instead of importing sympy again (a second or more).
    preload: ClassVar[tuple[str, ...]] = ("math_verify",)

    class Config(RewardConfig):
        # Decimal places both sides are rounded to before numbers compare (math_verify's
        # float_rounding): 6 accepts 3.1415927 for \pi, 2 would accept 3.14.
        float_rounding: int = Field(6, ge=0)
        # math_verify's strict mode: variables must match (x=3 is not y=3). false: variables
        # are matched by position (y=3 is accepted for x=3).
        strict: bool = True

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()
        import math_verify  # lazily: sympy and the LaTeX parser take a second to import
        from math_verify import grader, parser

        # Our limits are process-based; math_verify warns once per process that its own are
        # off, which would print in every sandbox worker.
        parser.TIMEOUT_WARNING_SHOWN = grader.TIMEOUT_WARNING_SHOWN = True
        self._parse, self._verify = math_verify.parse, math_verify.verify
        self._gold_targets = (math_verify.LatexExtractionConfig(), math_verify.ExprExtractionConfig())
        # A boxed answer outranks "final answer is" anchors and loose LaTeX in the response.
        self._pred_targets = (
            math_verify.LatexExtractionConfig(boxed_match_priority=0),
            math_verify.ExprExtractionConfig(),
        )
        # A group's responses share one reference: parse it once, not once per response.
        self._gold = functools.lru_cache(maxsize=1024)(self._parse_gold)

    def _parse_gold(self, answer: str) -> list:
        return self._parse(gold_text(answer), self._gold_targets, parsing_timeout=None)

    def __call__(self, response: str, example: Any) -> dict[str, float]:
        gold = self._gold(example.answer)
        if not gold:
            raise ValueError(f"example {example.id}: math_verify cannot parse the reference answer {example.answer!r}")
        # math_verify's extraction knows \boxed only; \fbox is the same box.
        pred = self._parse(response.replace("\\fbox{", "\\boxed{"), self._pred_targets, parsing_timeout=None)
        correct = bool(pred) and self._verify(
            gold,
            pred,
            float_rounding=self.config.float_rounding,
            strict=self.config.strict,
            timeout_seconds=None,
        )
        return {"score": float(correct), "correct": float(correct)}
