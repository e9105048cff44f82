"""Reward plug-ins the reward tests name as ``support.reward_plugins:<name>`` (tests/ is on sys.path).

Each misbehaves in one way a user's reward can: raising, returning NaN, sleeping in C code on
a thread of its own, spinning in a loop that ignores signals, killing its process, or
segfaulting. Those that misbehave only on a trigger in the response score normally otherwise.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import zlib


def length(response: str, example) -> float:
    """len(response) / 10: a reward whose value tells which response it scored."""
    return len(response) / 10


def raises(response: str, example) -> float:
    raise RuntimeError("this reward always fails")


def not_finite(response: str, example) -> dict:
    return {"score": float("nan"), "correct": 1.0}


def saw_mpi4py(response: str, example) -> dict:
    """Whether the scoring process has mpi4py imported (``mpi``) or an MPI launcher's
    environment (``mpi_env``), and its process id."""
    mpi_env = any(k.startswith(("OMPI_", "PMIX_", "PMI_")) for k in os.environ)
    return {"score": 1.0, "mpi": float("mpi4py" in sys.modules), "mpi_env": float(mpi_env), "pid": float(os.getpid())}


def _on_trigger(response: str) -> bool:
    return response.startswith("TRIGGER")


def sleeps_in_thread(response: str, example) -> float:
    """On a trigger, a 60 s C-level sleep on a thread it starts and joins (no signal reaches it)."""
    if _on_trigger(response):
        t = threading.Thread(target=time.sleep, args=(60,))
        t.start()
        t.join()
    return 1.0


def busy_loop(response: str, example) -> float:
    """On a trigger, spins forever with SIGALRM/SIGINT/SIGTERM ignored."""
    if _on_trigger(response):
        for sig in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            pass
    return 1.0


def exits(response: str, example) -> float:
    """On a trigger, ends its process at once (no cleanup, no exception)."""
    if _on_trigger(response):
        os._exit(1)
    return 1.0


def segfaults(response: str, example) -> float:
    if _on_trigger(response):
        ctypes.string_at(0)
    return 1.0


class Broken:
    """A class reward whose construction fails: the sandbox must say so at start."""

    def __init__(self):
        raise RuntimeError("cannot load the grader model")

    def __call__(self, response, example):
        return 0.0


def c_sleep(response: str, example) -> float:
    """On a trigger, 60 s in libc's sleep() with every signal blocked: only SIGKILL ends it."""
    if _on_trigger(response):
        signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
        ctypes.CDLL(None).sleep(60)
    return 1.0


# Rewards with the wrong shape, refused by the role-map check (not at the first response).


def takes_one(response):
    return 1.0


def takes_three(response, example, extra):
    return 1.0


class NoCall:
    pass


class CallTakesOne:
    def __call__(self, response):
        return 1.0


class InitTakesTwo:
    def __init__(self, a, b):
        pass

    def __call__(self, response, example):
        return 1.0


class Fine:
    def __call__(self, response, example, *extra):
        return 1.0


def with_defaults(response, example, scale=1.0, **kw):
    return scale


def correct_of_two(response, example):
    """Reports a verdict outside [0, 1]: refused (counted as a failure), not summed into pass@k."""
    return {"score": 1.0, "correct": 2.0}


def mostly_all_equal(response: str, example) -> float:
    """Three examples in four score 1.0 whatever the response (their groups are all-equal, as a
    solved or hopeless prompt's are); the fourth scores the response's length parity, which
    differs between the samples of most groups (the dynamic-sampling tests)."""
    if example.id % 4:
        return 1.0
    return float(zlib.crc32(response.encode()) % 2)
