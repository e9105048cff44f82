"""One environment worker process: builds the environment, then answers calls one at a time.

Started by ``roles.environments.pool`` through the reward sandbox's worker machinery
(``roles.rewards.worker``: fork server, dies with the rank, stop signals ignored, MPI
environment dropped). It says ``("ready", None)`` or ``("error", message)``, then reads pickled
``(call, args)`` requests until its request pipe closes and answers each with a pickled
``("ok", value)`` or ``("error", "ValueError: ...")``. An exception in the environment is
its call's error; the worker goes on. Not known here: time limits, restarts, scheduling.
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any

from roles.environments import build_environment
from roles.rewards.worker import detach_from_rank

CALLS = ("reset", "step", "final", "tools")


def _answer(env: Any, call: str, args: tuple) -> Any:
    if call == "reset":
        return env.reset(*args)
    if call == "step":
        return env.step(*args)
    if call == "final":
        final = getattr(env, "final_reward", None)  # optional for a class that is not an Environment
        return final(*args) if final is not None else None
    if call == "tools":
        return [dict(spec) for spec in env.tools()]
    raise ValueError(f"unknown call {call!r} (calls: {', '.join(CALLS)})")


def serve(build: tuple, requests, results) -> None:
    """The worker's main: ``build_environment(*build)``, then answer requests until EOF."""
    detach_from_rank()
    try:
        env = build_environment(*build)
    except BaseException as e:  # noqa: BLE001 - the pool raises it as EnvironmentBuildError
        results.send(("error", "".join(traceback.format_exception_only(e)).strip()))
        return
    results.send(("ready", None))
    while True:
        try:
            call, args = pickle.loads(requests.recv_bytes())
        except EOFError:  # the rank closed the pipe, or died
            return
        try:
            out = pickle.dumps(("ok", _answer(env, call, args)), pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - the environment's error is its call's result
            out = pickle.dumps(("error", f"{type(e).__name__}: {e}"), pickle.HIGHEST_PROTOCOL)
        results.send_bytes(out)
