"""The exact-match reward: the response equals the reference answer, character for character.

Only whitespace at both ends (``strip``) and letter case (``case_sensitive: false``) can be
forgiven; anything else (a trailing period, "18.0" for "18") is a different answer. For
numbers use the gsm8k reward, for mathematics math_verify.
"""

from __future__ import annotations

from typing import Any

from roles.rewards.base import RewardConfig


class ExactMatch:
    """1.0 when the (optionally stripped and case-folded) response equals ``example.answer``."""

    class Config(RewardConfig):
        strip: bool = True  # ignore whitespace at both ends of the response and the answer
        case_sensitive: bool = True  # false: "Paris" matches "paris" (Unicode case folding)

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    def _norm(self, text: str) -> str:
        if self.config.strip:
            text = text.strip()
        return text if self.config.case_sensitive else text.casefold()

    def __call__(self, response: str, example: Any) -> dict[str, float]:
        correct = float(self._norm(response) == self._norm(example.answer))
        return {"score": correct, "correct": correct}
