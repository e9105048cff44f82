"""Turning a verifier name from the config into a callable, and calling it safely.

A verifier is ``fn(prompt_text, response_text) -> float``. Built-ins are named (the demo's
``arith_exact``); user functions are given as ``package.module:function``. A user function
that raises, or runs past its time limit, scores 0 and is counted; the run goes on.
"""

from __future__ import annotations

import importlib
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

Verifier = Callable[[str, str], float]


def _builtin(name: str) -> Verifier:
    if name == "arith_exact":
        from roles.tasks.arith import arith_exact

        return arith_exact
    raise ValueError(f"unknown built-in verifier {name!r} (built-ins: arith_exact)")


def resolve(spec: str) -> Verifier:
    """A built-in name or ``package.module:function``; errors name what could not be found."""
    if ":" not in spec:
        return _builtin(spec)
    module_name, _, fn_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"task.verifier: cannot import module {module_name!r}: {e}") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ValueError(f"task.verifier: {module_name!r} has no function {fn_name!r}")
    return fn


class VerifierTimeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float):
    """Raise VerifierTimeout in this (main) thread after ``seconds``, via SIGALRM.

    A signal interrupts pure-Python code and sleeps; C code that never returns to the
    interpreter cannot be interrupted this way (documented limitation).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals only reach the main thread; callers there get the limit
        return

    def on_alarm(signum, frame):
        raise VerifierTimeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class SafeVerifier:
    fn: Verifier
    timeout_s: float
    failures: int = 0  # calls that raised
    timeouts: int = 0  # calls cut at the limit

    def __call__(self, prompt: str, response: str) -> float:
        try:
            with _time_limit(self.timeout_s):
                return float(self.fn(prompt, response))
        except VerifierTimeout:
            self.timeouts += 1
        except Exception:  # noqa: BLE001 - a user's bug must not end the run
            self.failures += 1
        return 0.0
