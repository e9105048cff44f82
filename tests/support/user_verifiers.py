"""User reward functions for the end-to-end tests (referenced as ``support.user_verifiers:NAME``).

They have the signature of every reward: ``(response_text, example) -> float | dict``.
"""

import time


def broken(response: str, example) -> float:
    raise ZeroDivisionError("a user's bug")


def slow(response: str, example) -> float:
    time.sleep(30)  # far past any test's reward.timeout_s
    return 1.0


def flaky(response: str, example) -> float:
    """Raises on half the responses, scores the rest exactly: the run must go on."""
    if len(response) % 2:
        raise ValueError("odd")
    return 1.0 if response == example.answer else 0.0
