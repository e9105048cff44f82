"""The environment pool: calls in sandboxed workers, out of order, bounded, crash-safe.

The scripted environment (``tests/support/environment_plugins.py``) sleeps, crashes or raises
as its turn says; each test is bounded by its own timeout.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from roles.environments import environment_section
from roles.environments.base import Opening, StepResult
from roles.environments.pool import EnvironmentBuildError, EnvironmentPool

SCRIPTED = "support.environment_plugins:ScriptedEnv"
pytestmark = pytest.mark.timeout(90)


def gone(pid: int) -> bool:
    """The process has exited (a zombie nothing reaps counts as exited)."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def pool_of(workers=2, timeout_s=5.0, name=SCRIPTED, **options):
    config = environment_section({"name": name, "workers": workers, "timeout_s": timeout_s, **options})
    return EnvironmentPool(config, seed=0, startup_timeout_s=60)


def wait_for(pool, count, limit_s=20.0):
    results, deadline = [], time.monotonic() + limit_s
    while len(results) < count and time.monotonic() < deadline:
        results += pool.ready(timeout_s=0.5)
    return results


def test_calls_answer_and_tools_come_from_the_environment():
    with pool_of(workers=1, greeting="hey") as pool:
        assert pool.tools()[0]["function"]["name"] == "echo"
        pool.submit(1, "reset", (None, [{"role": "user", "content": "q"}]))
        pool.submit(2, "step", (0, "x"))
        pool.submit(3, "final", (7,))
        assert pool.pending() == 3
        results = {r.key: r for r in wait_for(pool, 3)}
        assert pool.pending() == 0
        assert isinstance(results[1].value, Opening) and results[1].value.messages[0]["content"] == "q"
        state, step = results[2].value
        assert state == 1 and isinstance(step, StepResult) and step.messages[0]["content"] == "hey x"
        assert results[3].ok and results[3].value == 7.0
        with pytest.raises(ValueError, match="call must be one of"):
            pool.submit(4, "play", ())


def test_a_slow_call_does_not_hold_up_a_fast_one():
    with pool_of(workers=2) as pool:
        pool.submit(1, "step", (0, "sleep 2"))
        pool.submit(2, "step", (0, "fast"))
        first = wait_for(pool, 1)
        assert [r.key for r in first] == [2]
        second = wait_for(pool, 1)
        assert [r.key for r in second] == [1] and second[0].ok and second[0].seconds >= 2.0


def test_ready_waits_no_longer_than_asked():
    with pool_of(workers=1) as pool:
        pool.submit(1, "step", (0, "sleep 3"))
        started = time.monotonic()
        assert pool.ready(timeout_s=0.3) == []
        assert pool.ready() == []
        assert time.monotonic() - started < 1.0
        assert [r.key for r in wait_for(pool, 1)] == [1]


def test_a_call_past_the_limit_is_cut_and_its_worker_replaced():
    with pool_of(workers=1, timeout_s=1.0) as pool:
        old = pool.worker_pids[0]
        started = time.monotonic()
        pool.submit(1, "step", (0, "sleep 30"))
        pool.submit(2, "step", (0, "after"))  # queued behind it: runs on the replacement
        results = {r.key: r for r in wait_for(pool, 2)}
        assert not results[1].ok and results[1].error == "timed out after 1 s" and results[1].timed_out
        assert results[2].ok and results[2].value[1].messages[0]["content"] == "hello after"
        assert time.monotonic() - started < 10.0
        assert pool.timeouts == 1 and pool.restarts == 1 and pool.worker_pids[0] != old and gone(old)


def test_a_crash_is_reported_and_the_worker_replaced():
    with pool_of(workers=1) as pool:
        old = pool.worker_pids[0]
        pool.submit(1, "step", (0, "crash"))
        (result,) = wait_for(pool, 1)
        assert not result.ok and result.error == "the environment worker died (exit code 3)" and result.crashed
        assert pool.crashes == 1 and pool.restarts == 1 and gone(old)
        pool.submit(2, "step", (0, "again"))
        (result,) = wait_for(pool, 1)
        assert result.ok


def test_an_exception_is_reported_and_the_worker_kept():
    with pool_of(workers=1) as pool:
        pid = pool.worker_pids[0]
        pool.submit(1, "step", (0, "raise"))
        (result,) = wait_for(pool, 1)
        assert not result.ok and result.error == "ValueError: a bad turn"
        assert pool.worker_pids == [pid] and pool.restarts == 0 and pool.crashes == 0


def test_an_unpicklable_state_fails_its_call():
    with pool_of(workers=1) as pool:
        pool.submit(1, "step", (lambda: 0, "x"))
        (result,) = pool.ready()
        assert not result.ok and "cannot send the step" in result.error


def test_build_errors_raise_with_the_workers_message():
    with pytest.raises(EnvironmentBuildError, match="no data here"):
        pool_of(workers=1, name="support.environment_plugins:BrokenEnv")


def test_close_leaves_no_process_behind():
    pool = pool_of(workers=2)
    pool.submit(1, "step", (0, "sleep 30"))
    pool.ready(timeout_s=0.2)
    pids = list(pool.worker_pids)
    server = pool._server._forkserver_pid
    pool.close()
    pool.close()
    assert all(gone(pid) for pid in pids) and server is not None and gone(server)
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(2, "step", (0, "x"))


def test_the_tools_environment_in_the_pool():
    with pool_of(workers=1, name="tools", tools=["calculator"]) as pool:
        assert pool.tools()[0]["function"]["name"] == "calculator"
        turn = '<tool_call>{"name": "calculator", "arguments": {"expression": "123+456"}}</tool_call>'
        pool.submit(1, "step", (0, turn))
        (result,) = wait_for(pool, 1)
        assert result.ok and result.value[1].messages == [{"role": "tool", "name": "calculator", "content": "579"}]
        assert os.getpid() not in pool.worker_pids
