"""The format reward: 1.0 when the response has the required shape, else 0.0.

One check per reward, chosen by exactly one option: a regular expression that must occur
(``pattern``), a non-empty ``<tag>...</tag>`` element (``tag``), or a non-empty ``\\boxed{}``
(``boxed``). It says nothing about whether the answer is right, so it reports no
``correct``; combine it with a verifier (a small weight) to reward the shape alongside.
Mistakes in the options (none or two checks chosen, a regex that does not compile, a tag
that is not a name) are configuration errors, raised when the reward is built.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import field_validator, model_validator

from roles.rewards.base import RewardConfig
from roles.rewards.math_verify import last_boxed

_TAG_NAME = re.compile(r"[A-Za-z_][\w.-]*")


class FormatReward:
    """A shape check on the response text; see the module docstring."""

    class Config(RewardConfig):
        # A regular expression that must be found in the response (re.search, with DOTALL:
        # "." also matches newlines), e.g. "^<think>.*</think>\s*<answer>.*</answer>$".
        pattern: str | None = None
        # The name of an element that must be present with non-blank content: "answer"
        # requires <answer>...</answer>.
        tag: str | None = None
        boxed: bool = False  # require a \boxed{...} (or \fbox{...}) with non-blank content

        @field_validator("pattern")
        @classmethod
        def _compiles(cls, v: str | None) -> str | None:
            if v is not None:
                try:
                    re.compile(v)
                except re.error as e:
                    raise ValueError(f"option 'pattern' is not a valid regular expression: {e}") from None
            return v

        @field_validator("tag")
        @classmethod
        def _is_name(cls, v: str | None) -> str | None:
            if v is not None and not _TAG_NAME.fullmatch(v):
                raise ValueError(
                    f"option 'tag' must be an element name such as 'answer' (no angle brackets), got {v!r}"
                )
            return v

        @model_validator(mode="after")
        def _exactly_one(self):
            chosen = [
                name
                for name, on in (
                    ("pattern", self.pattern is not None),
                    ("tag", self.tag is not None),
                    ("boxed", self.boxed),
                )
                if on
            ]
            if len(chosen) != 1:
                got = ", ".join(chosen) if chosen else "none"
                raise ValueError(
                    f"the format reward takes exactly one of the options 'pattern', 'tag' or 'boxed: true' (got {got})"
                )
            return self

    def __init__(self, config: Config):
        self.config = config
        if config.pattern is not None:
            regex = re.compile(config.pattern, re.DOTALL)
            self._check = lambda text: regex.search(text) is not None
        elif config.tag is not None:
            t = re.escape(config.tag)
            element = re.compile(rf"<{t}>(.*?)</{t}>", re.DOTALL)
            self._check = lambda text: any(m.group(1).strip() for m in element.finditer(text))
        else:
            self._check = lambda text: bool(last_boxed(text))

    def __call__(self, response: str, example: Any) -> float:
        return float(self._check(response))
