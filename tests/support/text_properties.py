"""Properties of a response that the learned-reward tests measure, as weight-0 verifiers:
they add nothing to the reward but their share is logged per step (reward_components)."""

from __future__ import annotations


def ends_even(response: str, example) -> float:
    """1.0 when the response's last character is an even digit."""
    text = response.strip()
    return 1.0 if text and text[-1] in "02468" else 0.0
