"""The GSM8K reward: the response's final number against the reference, compared exactly.

GSM8K solutions end with ``#### <answer>``; a model taught that format writes it too. The
answer is the first number after the last ``####`` that has one; a response without it falls
back to the last number anywhere in the text (``fallback: last_number``), or scores 0
(``fallback: none``, the strict format). Numbers are read as people write them in these
problems: ``1,234`` (thousands separators), ``$18.00``, ``50%`` (the percent sign is dropped,
not divided out: GSM8K writes percentages as plain numbers), ``+5``, ``-7``, ``.5``, a
trailing period, units after the number (``18 dollars``), and a simple fraction ``3/4``
written without spaces. Values compare as exact rationals (``Fraction``): ``18.50 == 18.5``,
``0.75 == 3/4``, with no tolerance (references are integers or short decimals, so a
tolerance could only let wrong answers through). Not understood: words ("seven"), scientific
notation, LaTeX (``\\frac{1}{2}`` reads as its last number; use the math_verify reward).

The pure functions (``extract_answer``, ``normalize_number``, ``reference_answer``) are what
the GSM8K task imports to read its reference answers; this module needs only the standard
library and pydantic.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Literal

from roles.rewards.base import RewardConfig

# A number as written in text: an optional sign (a minus only where it cannot be a dash
# between two words or numbers, so "5-7 apples" is 5 and 7), an optional "$", an integer
# with or without thousands separators and an optional decimal part, or a bare ".5"; an
# optional "/<integer>" directly after makes a fraction.
_NUMBER = re.compile(
    r"(?<![\w./])(?P<sign>(?<![\w)])[-+\u2212])?\$?\s?"
    r"(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?:/(?P<den>\d+)(?!\.\d))?"
)
_MARKER = "####"


def _value(m: re.Match) -> Fraction | None:
    value = Fraction(m.group("num").replace(",", ""))
    if m.group("den") is not None:
        den = int(m.group("den"))
        if den == 0:
            return None
        value /= den
    return -value if m.group("sign") in ("-", "\u2212") else value


def _canonical(value: Fraction) -> str:
    """``72``, ``18.5``, ``-0.25``: a terminating decimal without trailing zeros, else ``p/q``."""
    if value.denominator == 1:
        return str(value.numerator)
    d, places = value.denominator, 0
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        return f"{value.numerator}/{value.denominator}"
    while (value * 10**places).denominator != 1:
        places += 1
    scaled = abs(value.numerator * 10**places // value.denominator)
    digits = str(scaled).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def _numbers(text: str) -> list[Fraction]:
    return [v for v in map(_value, _NUMBER.finditer(text)) if v is not None]


def normalize_number(s: str) -> str | None:
    """The canonical form of ``s`` if it is one number (``" $1,234.00 "`` -> ``"1234"``), else None.

    Accepted around the number: whitespace, ``$``, a trailing ``%`` or period, a leading
    ``+``. ``"1/2"`` -> ``"0.5"``; ``"1/3"`` stays ``"1/3"``; ``"18 dollars"`` -> None.
    """
    text = s.strip().rstrip(".").rstrip("%").strip()
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    value = _value(m)
    return None if value is None else _canonical(value)


def extract_answer(text: str, fallback: Literal["last_number", "none"] = "last_number") -> str | None:
    """The response's answer in canonical form, or None when there is none.

    The first number after the last ``####`` that is followed by one; else, with
    ``fallback="last_number"``, the last number in the whole text.
    """
    for part in reversed(text.split(_MARKER)[1:]):
        found = _NUMBER.search(part)
        if found is not None and (value := _value(found)) is not None:
            return _canonical(value)
    if fallback == "none":
        return None
    if fallback != "last_number":
        raise ValueError(f"fallback must be 'last_number' or 'none', got {fallback!r}")
    numbers = _numbers(text)
    return _canonical(numbers[-1]) if numbers else None


def reference_answer(answer_field: str) -> str:
    """The reference from a GSM8K ``answer`` column (reasoning, then ``#### 72``): ``"72"``.

    Thousands separators are removed (``#### 1,234`` -> ``"1234"``); anything else after the
    marker is kept as written. Raises ValueError when the field has no ``#### <answer>``.
    """
    _, marker, tail = answer_field.rpartition(_MARKER)
    answer = tail.strip().replace(",", "")
    if not marker or not answer:
        raise ValueError(f"a GSM8K answer field ends with '#### <answer>', got {answer_field[-80:]!r}")
    return answer


class GSM8KReward:
    """``correct_score`` for the right final number, ``format_score`` for a wrong one, else 0."""

    class Config(RewardConfig):
        # Where the answer comes from when the response has no "#### N": the last number in
        # the text ("last_number"), or nowhere ("none": the response scores 0).
        fallback: Literal["last_number", "none"] = "last_number"
        correct_score: float = 1.0  # score of a response whose answer equals the reference
        # Score of a response with an answer that is wrong (verl's format score); 0 when no
        # answer could be found at all.
        format_score: float = 0.0

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    def __call__(self, response: str, example: Any) -> dict[str, float]:
        ref_text = example.answer
        if _MARKER in ref_text:  # a task that kept the whole answer column
            ref_text = reference_answer(ref_text)
        reference = normalize_number(ref_text)
        if reference is None:
            raise ValueError(f"example {example.id}: reference answer {example.answer!r} is not a number")
        got = extract_answer(response, self.config.fallback)
        if got is None:
            return {"score": 0.0, "correct": 0.0, "extracted": 0.0}
        correct = Fraction(got) == Fraction(reference)
        score = self.config.correct_score if correct else self.config.format_score
        return {"score": score, "correct": float(correct), "extracted": 1.0}
