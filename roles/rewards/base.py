"""The Reward interface: ``(response_text, example) -> float | dict``.

A reward sees the decoded response and the whole :class:`~roles.tasks.base.Example` (its
reference answer and metadata). It returns a score, or a dict with ``score`` plus named
components (``{"score": 1.0, "correct": 1.0}``), every one of which is logged. Built-ins and
user code have the same signature:

- a function ``def my_reward(response: str, example) -> float | dict``, named in the role map
  as ``package.module:my_reward`` (it takes no options);
- a class with a nested ``Config`` (a :class:`~roles.sections.base.Section`) and
  ``__init__(self, config)`` and ``__call__(self, response, example)``: the options written
  beside its name in the role map are validated against ``Config`` with the rest of the file.

A verifier that decides right or wrong should report ``correct`` (0 or 1): evaluation's
pass@k and the per-step ``correct_mean`` read it. Rewards run inside a separate worker
process (``roles.rewards.sandbox``), so a time limit holds whatever the function does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from roles.sections.base import Section

RewardValue = float | Mapping[str, float]
RewardFn = Callable[[str, Any], RewardValue]


class RewardConfig(Section):
    """A reward's own options: those of a reward that has none; rewards with options subclass it.

    Not the role map's ``reward:`` section, which is ``roles.sections.reward.RewardSection``."""


def score_of(value: RewardValue) -> tuple[float, dict[str, float]]:
    """Split a reward's return value into its score and its extra named components."""
    if isinstance(value, Mapping):
        if "score" not in value:
            raise ValueError(f"a reward that returns a dict must include 'score', got keys {sorted(value)}")
        extras = {str(k): float(v) for k, v in value.items() if k != "score"}
        return float(value["score"]), extras
    if isinstance(value, bool):
        return float(value), {}
    return float(value), {}
