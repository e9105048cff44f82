"""User reward functions for the end-to-end tests (referenced as ``user_verifiers:NAME``)."""

import time


def broken(prompt: str, response: str) -> float:
    raise ZeroDivisionError("a user's bug")


def slow(prompt: str, response: str) -> float:
    time.sleep(30)  # far past any test's verifier_timeout_s
    return 1.0


def flaky(prompt: str, response: str) -> float:
    """Raises on half the prompts, scores the rest exactly: the run must go on."""
    from roles.tasks.arith import arith_exact

    if len(response) % 2:
        raise ValueError("odd")
    return arith_exact(prompt, response)
