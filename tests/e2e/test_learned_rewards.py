"""End-to-end runs (mpirun, the arith demo on CPU) with a learned reward as the reward.

The HTTP scorer's tests start a real server on 127.0.0.1 in this process: the job's reward
rank, on the same machine, reaches it there."""

from __future__ import annotations

import os
import time

import pytest

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S, run_job_capturing
from support.paths import REPO
from support.reward_server import HANG, ScoreServer, scores_of

pytestmark = pytest.mark.timeout(900)

SMALL = {"rollout": {"prompts_per_step": 4, "samples_per_prompt": 4}, "run": {"steps": 3}}


def write_config(tmp_path, sft_model, **overrides):
    base = {"model": {"path": str(sft_model)}, "run": {"out": str(tmp_path / "run"), "progress": False}}
    return recipe.write_config(CONFIG, tmp_path / "run", recipe.merge_overrides(base, overrides))


def run(tmp_path, sft_model, **overrides) -> list[dict]:
    cfg = write_config(tmp_path, sft_model, **overrides)
    pythonpath = os.pathsep.join([str(REPO / "tests"), str(REPO)])
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env={"PYTHONPATH": pythonpath})
    return recipe.read_metrics(tmp_path / "run")


def ends_in_even_digit(item: dict) -> float:
    text = item["response"].strip()
    return 1.0 if text[-1:].isdigit() and int(text[-1]) % 2 == 0 else 0.0


def test_http_reward_server_scores_an_rl_run(tmp_path, sft_model):
    with ScoreServer(lambda s, items, i: scores_of(items, ends_in_even_digit)) as server:
        metrics = run(tmp_path, sft_model, **SMALL, reward={"name": "http", "url": server.url, "batch_size": 8})
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for m in metrics:
        assert m["reward_mean"] is not None and 0.0 <= m["reward_mean"] <= 1.0
        assert m["reward_components"]["http"] == pytest.approx(m["reward_mean"])  # the only component
        assert m["verifier_failures"] == 0
    scored = [item for request in server.requests for item in request]
    assert len(scored) >= 3 * 4 * 4  # every training sample went to the server
    assert max(server.sizes()) <= 8
    assert all(item["prompt"] and item["messages"] and item["answer"] for item in scored)
    # The run's reward is the server's: over the three steps, the share of even endings.
    even = sum(ends_in_even_digit(item) for item in scored)
    assert 0 < even < len(scored)  # the warm-started policy writes both (the test can fail)


def test_http_reward_server_failures_are_counted_and_the_run_finishes(tmp_path, sft_model):
    def answer(server, items, index):
        if index % 3 == 1:
            return 200, b"<html>oops</html>"  # garbage: not retried
        if index % 3 == 2:
            return 500, b"overloaded"  # an error: retried (retries: 0 here), then failed
        return scores_of(items, ends_in_even_digit)

    with ScoreServer(answer) as server:
        metrics = run(
            tmp_path,
            sft_model,
            **SMALL,
            reward={"name": "http", "url": server.url, "batch_size": 4, "concurrency": 2, "retries": 0},
        )
    assert [m["step"] for m in metrics] == [0, 1, 2]
    failures = sum(m["verifier_failures"] for m in metrics)
    assert 0 < failures < 3 * 4 * 4  # some batches failed, the others were scored
    assert sum(m["reward_components"].get("http/failed", 0.0) for m in metrics) > 0


def test_an_unreachable_reward_server_ends_the_job_naming_the_url(tmp_path, sft_model):
    with ScoreServer() as server:
        url = server.url  # a port that was ours: nothing listens there once stopped
    cfg = write_config(tmp_path, sft_model, **SMALL, reward={"name": "http", "url": url, "connect_timeout_s": 2.0})
    t0 = time.monotonic()
    proc = run_job_capturing(cfg, {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])})
    took = time.monotonic() - t0
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "reward.url: cannot reach the reward server" in out and url in out, out[-3000:]
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or recipe.read_metrics(tmp_path / "run") == []
    print(f"the job ended {took:.0f} s after it started")


def test_a_reward_server_that_stops_answering_ends_the_job_with_a_message(tmp_path, sft_model):
    answer = lambda s, items, i: scores_of(items, ends_in_even_digit) if i < 2 else HANG  # noqa: E731
    with ScoreServer(answer) as server:
        cfg = write_config(
            tmp_path,
            sft_model,
            rollout={"prompts_per_step": 4, "samples_per_prompt": 4},
            run={"steps": 50},
            reward={
                "name": "http",
                "url": server.url,
                "batch_size": 16,
                "request_timeout_s": 1.0,
                "give_up_after_s": 4.0,
            },
        )
        t0 = time.monotonic()
        proc = run_job_capturing(cfg, {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])})
        took = time.monotonic() - t0
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert f"reward server {server.url} has not answered for" in out, out[-3000:]
    assert len(server.requests) > 2  # it answered, then hung
    print(f"the job ended {took:.0f} s after it started")
