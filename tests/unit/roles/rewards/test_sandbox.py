"""Combining rewards, and running them in the process sandbox: limits, crashes, build errors.

Also the small built-ins whose options are checked here (format, exact). The misbehaving
rewards are in ``tests/support/reward_plugins.py``; each sandbox test is bounded by its own timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pydantic
import pytest

from roles.rewards import build_reward
from roles.rewards.combine import CombinedReward, ComponentSpec
from roles.rewards.sandbox import RewardBuildError, RewardSandbox
from roles.tasks.base import Example
from support.paths import REPO

EX = Example(id=1, prompt="How many?", answer="18")
LIMIT = 1.0  # the per-item time limit of the hanging tests


def spec(label, name, weight=1.0, **options):
    return ComponentSpec(label, name, weight, options)


def gone(pid: int) -> bool:
    """The process has exited (on Linux a zombie that nothing reaps counts as exited)."""
    if Path("/proc/self").exists():
        try:
            return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError, IndexError):
            # ProcessLookupError: the process was reaped between the open and the read.
            return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ---------------------------------------------------------------- combining (in-process)


@pytest.mark.timeout(30)
def test_weighted_sum_and_components():
    r = CombinedReward([spec("answer", "gsm8k"), spec("fmt", "format", 0.25, pattern=r"####\s*\d")])
    s = r("9 * 2 = 18\n#### 18", EX)
    assert s.score == pytest.approx(1.25) and s.failures == 0
    assert s.components == {"answer": 1.0, "answer/correct": 1.0, "answer/extracted": 1.0, "fmt": 1.0, "correct": 1.0}
    s = r("The answer is 17", EX)  # fallback finds a wrong number; no marker
    assert s.score == 0.0 and s.components["correct"] == 0.0 and s.components["fmt"] == 0.0


@pytest.mark.timeout(30)
def test_correct_comes_from_the_first_component_reporting_it():
    r = CombinedReward([spec("fmt", "format", 0.1, boxed=True), spec("a", "exact"), spec("b", "gsm8k")])
    s = r("18", EX)  # exact: right; gsm8k: right; no box
    assert s.components["correct"] == 1.0 and s.score == pytest.approx(2.0)
    s = r(" 18 \\boxed{18}", EX)  # exact: wrong (the box); gsm8k: right
    assert s.components["correct"] == 0.0 and s.components["b/correct"] == 1.0


@pytest.mark.timeout(30)
def test_without_a_verifier_correct_means_a_positive_score():
    r = CombinedReward([spec("fmt", "format", tag="answer")])
    assert r("<answer>18</answer>", EX).components == {"fmt": 1.0, "correct": 1.0}
    assert r("<answer> </answer>", EX).components == {"fmt": 0.0, "correct": 0.0}


@pytest.mark.timeout(30)
def test_a_failing_component_scores_zero_and_is_counted():
    r = CombinedReward(
        [
            spec("bad", "support.reward_plugins:raises"),
            spec("nan", "support.reward_plugins:not_finite"),
            spec("len", "support.reward_plugins:length", 2.0),
        ]
    )
    s = r("abcd", EX)
    assert s.failures == 2
    assert s.score == pytest.approx(0.8)  # 2.0 * len("abcd") / 10
    assert s.components == {"bad": 0.0, "nan": 0.0, "len": pytest.approx(0.4), "correct": 0.0}


@pytest.mark.timeout(30)
def test_a_correct_outside_0_1_is_a_failure_not_a_verdict():
    # pass@k counts correct as a share of one sample: a 2.0 broke eval and correct_mean.
    s = CombinedReward(
        [spec("two", "support.reward_plugins:correct_of_two"), spec("len", "support.reward_plugins:length")]
    )("ab", EX)
    assert s.failures == 1 and s.components["two"] == 0.0 and s.components["correct"] == 0.0


@pytest.mark.timeout(30)
def test_component_specs_are_checked():
    with pytest.raises(ValueError, match="label"):
        spec("a/b", "exact")
    with pytest.raises(ValueError, match="correct"):
        spec("correct", "exact")
    with pytest.raises(ValueError, match="weight"):
        spec("a", "exact", float("nan"))
    with pytest.raises(ValueError, match="repeated: a"):
        CombinedReward([spec("a", "exact"), spec("a", "gsm8k")])
    with pytest.raises(ValueError, match="'a' \\(no_such_reward\\): PluginError: unknown reward"):
        CombinedReward([spec("a", "no_such_reward")])


# ---------------------------------------------------------------- format and exact


@pytest.mark.timeout(30)
def test_format_checks():
    regex = build_reward("format", {"pattern": r"^<think>.*</think>\s*<answer>.*</answer>$"})
    assert regex("<think>a\nb</think> <answer>3</answer>", EX) == 1.0  # DOTALL: "." crosses lines
    assert regex("<answer>3</answer>", EX) == 0.0
    tag = build_reward("format", {"tag": "answer"})
    assert tag("so <answer> 18 </answer>", EX) == 1.0
    assert tag("so <answer>  </answer>", EX) == 0.0
    assert tag("so <answer>18", EX) == 0.0
    boxed = build_reward("format", {"boxed": True})
    assert boxed("thus \\boxed{\\frac{1}{2}}", EX) == 1.0
    assert boxed("thus \\boxed{}", EX) == 0.0
    assert boxed("thus 1/2", EX) == 0.0


@pytest.mark.parametrize(
    "options,message",
    [
        ({}, "exactly one of the options 'pattern', 'tag' or 'boxed: true' \\(got none\\)"),
        ({"pattern": "a", "boxed": True}, "\\(got pattern, boxed\\)"),
        ({"pattern": "(unclosed"}, "option 'pattern' is not a valid regular expression"),
        ({"tag": "<answer>"}, "option 'tag' must be an element name"),
        ({"boxed": "yes"}, "boxed"),
        ({"tags": "answer"}, "tags"),
    ],
)
@pytest.mark.timeout(30)
def test_format_option_errors(options, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        build_reward("format", options)


@pytest.mark.timeout(30)
def test_exact_options():
    ex = Example(2, "Capital of France?", "Paris")
    assert build_reward("exact", {})(" Paris\n", ex) == {"score": 1.0, "correct": 1.0}
    assert build_reward("exact", {"strip": False})(" Paris\n", ex)["score"] == 0.0
    assert build_reward("exact", {})("paris", ex)["score"] == 0.0
    assert build_reward("exact", {"case_sensitive": False})("PARIS", ex)["score"] == 1.0
    assert build_reward("exact", {})("Paris.", ex)["score"] == 0.0
    with pytest.raises(pydantic.ValidationError, match="case_sensitive"):
        build_reward("exact", {"case_sensitive": "no"})


# ---------------------------------------------------------------- the sandbox


@pytest.mark.timeout(60)
def test_sandbox_matches_in_process_and_runs_user_functions():
    specs = [spec("answer", "gsm8k"), spec("len", "support.reward_plugins:length", 0.5)]
    items = [(f"so {n} in all\n#### {n}", EX) for n in (18, 17, 18, 5)] + [("no answer", EX)]
    local = CombinedReward(specs)
    with RewardSandbox(specs, timeout_s=10) as sb:
        got = sb.score(items)
        assert sb.score([]) == []
    assert [(r.score, r.components, r.failures, r.timed_out) for r in got] == [
        (s.score, s.components, 0, False) for s in (local(t, e) for t, e in items)
    ]
    assert [r.components["correct"] for r in got] == [1.0, 0.0, 1.0, 0.0, 0.0]


@pytest.mark.timeout(60)
def test_the_worker_has_no_mpi4py_even_when_the_parent_does(monkeypatch):
    import mpi4py  # noqa: F401 - the package only: MPI is not initialised by this

    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")  # as under mpirun
    monkeypatch.setenv("PMIX_RANK", "3")
    with RewardSandbox([spec("m", "support.reward_plugins:saw_mpi4py")], timeout_s=10) as sb:
        (r,) = sb.score([("x", EX)])
    assert r.components["m/mpi"] == 0.0 and r.components["m/pid"] != os.getpid()
    assert r.components["m/mpi_env"] == 0.0


@pytest.mark.timeout(60)
def test_failures_are_counted_in_the_sandbox():
    with RewardSandbox([spec("bad", "support.reward_plugins:raises"), spec("ok", "exact")], timeout_s=10) as sb:
        results = sb.score([("18", EX), ("17", EX)])
        assert [r.failures for r in results] == [1, 1] and sb.failures == 2
        assert [r.score for r in results] == [1.0, 0.0]
        assert sb.timeouts == sb.restarts == 0


@pytest.mark.parametrize("plugin", ["sleeps_in_thread", "busy_loop", "c_sleep"])
@pytest.mark.timeout(60)
def test_a_hang_is_cut_at_the_limit_and_the_rest_still_score(plugin):
    with RewardSandbox(
        [spec("x", f"support.reward_plugins:{plugin}"), spec("len", "support.reward_plugins:length")], timeout_s=LIMIT
    ) as sb:
        first = sb.worker_pids[0]
        t0 = time.monotonic()
        results = sb.score([("a", EX), ("TRIGGER", EX), ("bb", EX), ("TRIGGER 2", EX), ("ccc", EX)])
        took = time.monotonic() - t0
        assert 2 * LIMIT * 0.9 <= took <= 2 * (LIMIT + 2)
        assert [r.timed_out for r in results] == [False, True, False, True, False]
        assert [r.score for r in results] == [pytest.approx(1.1), 0.0, pytest.approx(1.2), 0.0, pytest.approx(1.3)]
        assert results[1].components == {"x": 0.0, "len": 0.0, "correct": 0.0}
        assert (sb.timeouts, sb.restarts, sb.failures) == (2, 2, 0)
        assert sb.worker_pids[0] != first
        assert sb.score([("dddd", EX)])[0].score == pytest.approx(1.4)  # the fresh worker works
    deadline = time.monotonic() + 10
    while not gone(first) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(first)


@pytest.mark.parametrize("plugin", ["exits", "segfaults"])
@pytest.mark.timeout(60)
def test_a_dying_worker_fails_its_item_and_is_restarted(plugin):
    with RewardSandbox([spec("x", f"support.reward_plugins:{plugin}")], timeout_s=10) as sb:
        t0 = time.monotonic()
        results = sb.score([("a", EX), ("TRIGGER", EX), ("b", EX), ("TRIGGER", EX), ("c", EX)])
        assert time.monotonic() - t0 < 5
        assert [r.failures for r in results] == [0, 1, 0, 1, 0]
        assert [r.score for r in results] == [1.0, 0.0, 1.0, 0.0, 1.0]
        assert not any(r.timed_out for r in results)
        assert (sb.failures, sb.restarts, sb.timeouts) == (2, 2, 0)


class Interrupt(Exception):
    pass


@pytest.mark.timeout(60)
def test_an_interrupted_call_leaves_no_stale_results():
    def interrupt(*_):
        raise Interrupt

    old = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with RewardSandbox(
            [spec("x", "support.reward_plugins:busy_loop"), spec("len", "support.reward_plugins:length")], timeout_s=30
        ) as sb:
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            with pytest.raises(Interrupt):
                sb.score([("a", EX), ("TRIGGER", EX), ("bbbbbbb", EX)])
            t0 = time.monotonic()
            results = sb.score([("cc", EX), ("ddd", EX)])
            assert [r.score for r in results] == [pytest.approx(1.2), pytest.approx(1.3)]
            assert time.monotonic() - t0 < 10
    finally:
        signal.signal(signal.SIGUSR1, old)


@pytest.mark.timeout(60)
def test_a_worker_killed_between_calls_is_replaced():
    with RewardSandbox([spec("x", "exact")], timeout_s=10) as sb:
        pid = sb.worker_pids[0]
        os.kill(pid, signal.SIGKILL)
        while not gone(pid):
            time.sleep(0.01)
        assert [r.score for r in sb.score([("18", EX), ("1", EX)])] == [1.0, 0.0]
        assert sb.restarts == 1 and sb.failures == 0


@pytest.mark.timeout(60)
def test_items_spread_over_workers_and_large_items_pass():
    with RewardSandbox(
        [spec("m", "support.reward_plugins:saw_mpi4py"), spec("len", "support.reward_plugins:length")],
        timeout_s=10,
        workers=2,
    ) as sb:
        assert len(set(sb.worker_pids)) == 2
        big = "x" * (3 << 20)  # larger than any pipe buffer: sent alone, to an idle worker
        results = sb.score([(str(i), EX) for i in range(30)] + [(big, EX), ("end", EX)])
        assert {r.components["m/pid"] for r in results} == set(map(float, sb.worker_pids))
        assert results[-2].components["len"] == len(big) / 10
        assert [r.components["len"] for r in results[:30]] == [len(str(i)) / 10 for i in range(30)]


@pytest.mark.parametrize(
    "specs,message",
    [
        (
            [spec("f", "format")],
            "cannot build the rewards: ValueError: reward 'f' \\(format\\): options: "
            "Value error, the format reward takes exactly one of the options 'pattern'",
        ),
        ([spec("g", "gsm8k", fallback="first")], "reward 'g' \\(gsm8k\\): fallback: Input should be"),
        ([spec("b", "support.reward_plugins:Broken")], "cannot load the grader model"),
        ([spec("m", "no_such_module:fn")], "cannot import module 'no_such_module'"),
    ],
)
@pytest.mark.timeout(60)
def test_a_build_error_is_raised_at_construction(specs, message):
    t0 = time.monotonic()
    with pytest.raises(RewardBuildError, match=message):
        RewardSandbox(specs, timeout_s=5)
    assert time.monotonic() - t0 < 30


@pytest.mark.timeout(60)
def test_close_is_idempotent_and_kills_the_workers():
    sb = RewardSandbox([spec("x", "exact")], timeout_s=5, workers=2)
    pids = sb.worker_pids
    sb.close()
    sb.close()
    assert all(gone(p) for p in pids)
    with pytest.raises(RuntimeError, match="closed"):
        sb.score([("18", EX)])
    with pytest.raises(ValueError, match="timeout_s"):
        RewardSandbox([spec("x", "exact")], timeout_s=0)


@pytest.fixture
def run_script(tmp_path):
    """``run_script(body, prelude="")``: a Python script that builds a sandbox, started;
    killed at teardown if a failed test left it running (its workers die with it)."""
    started: list[subprocess.Popen] = []

    def start(body: str, prelude: str = "") -> subprocess.Popen:
        started.append(_start_script(tmp_path, body, prelude))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _start_script(tmp_path: Path, body: str, prelude: str) -> subprocess.Popen:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(prelude)
        + textwrap.dedent(f"""\
        import sys
        sys.path[:0] = [{str(REPO)!r}, {str(REPO / "tests")!r}]
        with open({str(tmp_path / "imports")!r}, "a") as f:  # once per run of this file
            f.write("x")
        if __name__ == "__main__":
            from roles.rewards.combine import ComponentSpec
            from roles.rewards.sandbox import RewardSandbox
            from roles.tasks.base import Example
        """)
        + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)


@pytest.mark.timeout(90)
def test_the_parent_script_is_not_run_again_in_the_worker(tmp_path, run_script):
    proc = run_script("""\
        with RewardSandbox([ComponentSpec("x", "exact", 1.0, {})], timeout_s=5) as sb:
            print(sb.score([("1", Example(0, "", "1"))])[0].score)
        """)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "1.0"
    assert (tmp_path / "imports").read_text() == "x"


@pytest.mark.timeout(90)
def test_the_rank_exits_promptly_while_a_worker_is_stuck(run_script):
    # A scoring thread is waiting on a worker that blocks every signal but SIGKILL; the main
    # thread ends. multiprocessing's exit hook alone would SIGTERM and join that worker forever,
    # and it runs before the sandbox's finalizer when some finalizer existed before it (prelude).
    prelude = """\
        import weakref
        class Early: pass
        early = Early()
        weakref.finalize(early, print)
        """
    proc = run_script(
        prelude=prelude,
        body="""\
        import threading, time
        sb = RewardSandbox([ComponentSpec("x", "support.reward_plugins:c_sleep", 1.0, {})], timeout_s=300)
        threading.Thread(target=sb.score, args=([("TRIGGER", Example(0, "", "1"))],), daemon=True).start()
        print(sb.worker_pids[0], flush=True)
        time.sleep(1)
        """,
    )
    worker = int(proc.stdout.readline())
    t0 = time.monotonic()
    assert proc.wait(30) == 0
    assert time.monotonic() - t0 < 15
    assert gone(worker)


@pytest.mark.timeout(60)
def test_closing_while_another_thread_scores_starts_no_worker():
    # What the rank's exit does while a scoring thread waits on a stuck worker: close() kills
    # that worker, and the thread, seeing it die, must not start a replacement (nor a fresh
    # fork server): that worker would ignore SIGTERM and hang multiprocessing's exit hook.
    import multiprocessing

    sb = RewardSandbox([spec("x", "support.reward_plugins:c_sleep")], timeout_s=300)
    stuck = sb.worker_pids[0]
    raised: list[BaseException] = []

    def score():
        try:
            sb.score([("TRIGGER", Example(0, "", "1"))])
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            raised.append(e)

    thread = threading.Thread(target=score, daemon=True)
    thread.start()
    time.sleep(0.5)  # the worker is in its sleep, the thread in its wait
    sb.close()
    thread.join(20)
    assert not thread.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], RuntimeError) and "closed" in str(raised[0])
    assert sb.restarts == 0 and sb.worker_pids == []
    assert gone(stuck)
    assert [p for p in multiprocessing.active_children() if p.name == "mpirl-reward-worker"] == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.timeout(90)
def test_a_stuck_worker_dies_with_its_rank(run_script):
    proc = run_script("""\
        sb = RewardSandbox([ComponentSpec("x", "support.reward_plugins:busy_loop", 1.0, {})], timeout_s=300)
        print(sb.worker_pids[0], flush=True)
        sb.score([("TRIGGER", Example(0, "", "1"))])
        """)
    worker = int(proc.stdout.readline())
    time.sleep(0.3)
    assert not gone(worker)
    proc.kill()  # SIGKILL: no atexit, no finalizer runs in the rank
    proc.wait(10)
    deadline = time.monotonic() + 10
    while not gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(worker)


@pytest.mark.timeout(90)
def test_nothing_here_imports_mpi4py():
    code = (
        "import sys, roles, roles.rewards.sandbox, roles.rewards.gsm8k, roles.rewards.exact, "
        "roles.rewards.format, roles.rewards.math_verify; "
        "assert 'mpi4py' not in sys.modules, 'mpi4py imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr


@pytest.mark.timeout(60)
def test_stop_signals_to_the_workers_and_their_server_are_left_to_the_rank():
    """Open MPI forwards SIGTERM/SIGUSR1 to a rank's descendants and Slurm's --signal reaches
    every process of a task; the rank checkpoints after the step, which its workers must
    still score. (Before: SIGUSR1 killed them and their server mid-step.)"""
    items = [(f"#### {n}", EX) for n in (18, 17, 18, 5)]
    with RewardSandbox([spec("answer", "gsm8k")], timeout_s=10, workers=2) as sb:
        before = sb.score(items)
        server = sb._server._forkserver_pid
        for pid in [*sb.worker_pids, server]:
            for stop_signal in (signal.SIGUSR1, signal.SIGTERM):
                os.kill(pid, stop_signal)
        time.sleep(0.3)
        after = sb.score(items)
        assert not any(gone(pid) for pid in [*sb.worker_pids, server]) and sb.restarts == 0
    assert [r.score for r in after] == [r.score for r in before] and sum(r.failures for r in after) == 0
