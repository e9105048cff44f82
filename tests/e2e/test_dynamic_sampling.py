"""Dynamic sampling under asynchrony, end to end (bounded in time): on a task where most groups
score all the same (``support.reward_plugins:mostly_all_equal``: about 78% of groups), a step
trains only groups with signal until its refill bound, never waits long for refills, and a
killed run resumes with every step trained once."""

from __future__ import annotations

import os
import statistics

import pytest

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S, kill_after_checkpoint
from support.paths import REPO

pytestmark = pytest.mark.timeout(900)
PLUGINS_ENV = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
REWARD = {"name": "support.reward_plugins:mostly_all_equal"}
P, N, STEPS = 8, 4, 12


def _sim_job(tmp_path, sft_model, mode: str, staleness: int, dynamic: dict) -> list[dict]:
    # Generation a third of training's time (with ~4.5x the groups sampled per step trained):
    # the spares, handed out ahead of need, must keep the trainer fed.
    sim = {"per_token_s": 0.001, "lengths": {"kind": "lognormal", "mean": 8, "sigma": 1.0}, "vocab": 15}
    overrides = {
        "model": {"path": str(sft_model)},
        "world": {"generator": {"ranks": 2, "engine": "sim", "sim": sim, "max_seqs": 8}, "reward": 1, "trainer": 1},
        "rollout": {"mode": mode, "prompts_per_step": P, "samples_per_prompt": N, "max_new_tokens": 48},
        "reward": REWARD,
        "algorithm": {"sim": {"per_token_s": 0.0015, "per_step_s": 0.0}},
        "run": {"steps": STEPS, "max_staleness": staleness, "out": str(tmp_path), "progress": False},
    }
    overrides["rollout"]["dynamic_sampling"] = dynamic
    cfg = recipe.write_config(CONFIG, tmp_path, overrides)
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env=PLUGINS_ENV)
    return recipe.read_metrics(tmp_path)


def _check_steps(metrics: list[dict], staleness: int) -> None:
    assert [m["step"] for m in metrics] == list(range(STEPS))
    for m in metrics:
        ds = m["dynamic_sampling"]
        assert m["trainer"]["samples"] == P * N and m["staleness_max"] <= staleness, m["step"]
        assert all(0 <= v <= 1 + 1e-6 for v in m["busy"].values()), m["busy"]  # uneven steps: still a share
        if not ds["refill_bound_reached"]:  # every all-equal group was dropped: all trained have signal
            assert m["zero_advantage_group_share"] == 0, m["step"]
    assert sum(m["dynamic_sampling"]["filtered_groups"] for m in metrics) >= STEPS * P  # most groups dropped


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, staleness",
    [
        ("stream", 1),
        ("batch", 0),
        pytest.param("stream", 0, marks=pytest.mark.matrix),
        pytest.param("batch", 2, marks=pytest.mark.matrix),
    ],
)
def test_steps_train_only_groups_with_signal_at_any_staleness(tmp_path, sft_model, mode, staleness):
    metrics = _sim_job(tmp_path, sft_model, mode, staleness, {"max_refill_rounds": 8})
    _check_steps(metrics, staleness)


@pytest.mark.slow
def test_the_trainer_does_not_wait_for_refills(tmp_path, sft_model):
    metrics = _sim_job(tmp_path, sft_model, "stream", 1, {"max_refill_rounds": 8})
    _check_steps(metrics, 1)
    waits = [m["dynamic_sampling"]["trainer_wait_s"] for m in metrics[1:]]  # step 0 waits for the start
    train = statistics.median(m["training_s"] for m in metrics)
    # The bound: a step's data is ready as its predecessor's training ends, bar scheduling noise.
    assert statistics.median(waits) <= 0.1 * train, (waits, train)
    assert max(waits) <= 2.0, waits


@pytest.mark.slow
def test_a_refill_bound_of_one_round_ends_every_step(tmp_path, sft_model):
    """~78% of groups all-equal and at most P drops a step: steps fill with all-equal groups
    once the bound is reached instead of waiting for groups with signal."""
    metrics = _sim_job(tmp_path, sft_model, "stream", 1, {"max_refill_rounds": 1})
    _check_steps(metrics, 1)
    assert any(m["dynamic_sampling"]["refill_bound_reached"] for m in metrics)
    assert all(m["dynamic_sampling"]["filtered_groups"] <= P for m in metrics)


def _real_config(run_dir, sft_model):
    overrides = {
        "model": {"path": str(sft_model)},
        "rollout": {"prompts_per_step": P, "samples_per_prompt": N, "mode": "stream", "dynamic_sampling": True},
        "reward": REWARD,
        "run": {"out": str(run_dir), "progress": False, "steps": 8, "max_staleness": 1},
        "checkpoint": {"every_steps": 2, "keep_last": 2},
    }
    return recipe.write_config(CONFIG, run_dir, overrides)


@pytest.mark.slow
def test_a_killed_run_with_dynamic_sampling_trains_every_step_once(tmp_path, sft_model):
    run_dir = tmp_path / "run"
    kill_after_checkpoint(_real_config(run_dir, sft_model), run_dir, steps_done=4)
    recipe.run_job(_real_config(run_dir, sft_model), timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env=PLUGINS_ENV)
    metrics = recipe.read_metrics(run_dir)
    assert [m["step"] for m in metrics] == list(range(8))  # none missing, none twice
    assert [m["policy_version"] for m in metrics] == list(range(1, 9))
    assert all(m["trainer"]["samples"] == P * N and m["staleness_max"] <= 1 for m in metrics)
    assert all("dynamic_sampling" in m for m in metrics)
