"""End-to-end runs under mpirun (4 ranks, bounded in time): the whole RL loop on CPU."""

from __future__ import annotations

import importlib.util
import os

import pytest

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S
from support.paths import REPO

pytestmark = pytest.mark.timeout(900)


def run(tmp_path, sft_model, **overrides) -> list[dict]:
    base = {"model": {"path": str(sft_model)}, "run": {"out": str(tmp_path / "run"), "progress": False}}
    cfg = recipe.write_config(CONFIG, tmp_path / "run", recipe.merge_overrides(base, overrides))
    # The user verifiers live in tests/: the ranks import them from there.
    pythonpath = os.pathsep.join([str(REPO / "tests"), str(REPO)])
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env={"PYTHONPATH": pythonpath})
    return recipe.read_metrics(tmp_path / "run")


def _mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.parametrize("staleness, mode", [(0, "batch"), (1, "batch"), (1, "stream")])
def test_reward_rises_within_the_staleness_bound(tmp_path, sft_model, staleness, mode):
    # The demo's recipe (AIPO, lr 3e-5): training reward climbs about 0.07 in 80 steps.
    steps = 80
    metrics = run(tmp_path, sft_model, run={"steps": steps, "max_staleness": staleness}, rollout={"mode": mode})
    assert [m["step"] for m in metrics] == list(range(steps))  # metrics.jsonl is complete
    assert [m["policy_version"] for m in metrics] == list(range(1, steps + 1))
    for m in metrics:
        assert m["staleness_max"] <= staleness, m
        for key in (
            "reward_mean",
            "correct_mean",
            "loss",
            "tokens",
            "generation_s",
            "reward_s",
            "training_s",
            "weight_sync_s",
        ):
            assert m[key] is not None, key
    if staleness == 1:
        # The overlap actually happened: some batches were sampled one version behind.
        assert any(m["staleness_max"] == 1 for m in metrics)
    first, last = _mean([m["reward_mean"] for m in metrics[:20]]), _mean([m["reward_mean"] for m in metrics[-20:]])
    assert last > first + 0.03, (first, last)
    assert (tmp_path / "run" / "policy" / "config.json").is_file()  # the trained policy was saved


def test_a_broken_user_verifier_does_not_stop_the_run(tmp_path, sft_model):
    metrics = run(tmp_path, sft_model, run={"steps": 3}, reward={"name": "support.user_verifiers:flaky"})
    assert len(metrics) == 3
    failures = sum(m["verifier_failures"] for m in metrics)
    assert 0 < failures < 3 * 16 * 8  # some samples raised, the others were scored


def test_a_slow_user_verifier_is_cut_at_its_limit(tmp_path, sft_model):
    metrics = run(
        tmp_path,
        sft_model,
        rollout={"prompts_per_step": 2, "samples_per_prompt": 2},
        run={"steps": 2},
        reward={"name": "support.user_verifiers:slow", "timeout_s": 0.2},
    )
    assert sum(m["verifier_timeouts"] for m in metrics) == 2 * 2 * 2
    assert all(m["reward_mean"] == 0.0 for m in metrics)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (make test installs it)")
@pytest.mark.parametrize("mode", ["batch", "stream"])
def test_the_vllm_engine_runs_the_same_job(tmp_path, sft_model, mode):
    """engine: vllm in place of torch: weights pushed into vLLM each step, same reward pipeline
    (streamed: through vLLM's request-level engine, weights loaded while requests run)."""
    metrics = run(
        tmp_path,
        sft_model,
        world={"generator": {"ranks": 1, "engine": "vllm"}},
        run={"steps": 4, "max_staleness": 1},
        rollout={"mode": mode},
    )
    assert [m["policy_version"] for m in metrics] == [1, 2, 3, 4]
    assert all(0.0 <= m["reward_mean"] <= 1.0 for m in metrics)
    assert sum(m["reward_mean"] for m in metrics) > 0  # the warm-started policy scores some
    # Generated with pushed weights: versions 1..3 were loaded into the engine in place.
    assert max(m["staleness_max"] for m in metrics) <= 1
    assert sum(m["weight_sync_s"] for m in metrics) > 0


# Not the id "mpi": pytest-mpi skips tests with that keyword unless run under --with-mpi.
@pytest.mark.parametrize(
    "transport", [pytest.param("torch", id="gloo"), pytest.param("mpi", id="mpi-buffers", marks=pytest.mark.matrix)]
)
def test_sharded_trainers_feed_two_generators(tmp_path, sft_model, transport):
    """2 FSDP2 trainers push their shards straight to 2 generators (6 ranks): the job runs.

    With GRPO and a KL term, so the frozen reference is loaded and sharded like the policy;
    over gloo and over MPI buffers, with the generators' receives posted ahead of each push."""
    metrics = run(
        tmp_path,
        sft_model,
        world={"generator": 2, "trainer": 2},
        weights={"transport": transport},
        algorithm={"loss": "grpo", "kl_coef": 0.05},
        run={"steps": 4, "max_staleness": 1},
    )
    assert [m["policy_version"] for m in metrics] == [1, 2, 3, 4]
    assert all(m["tokens"] > 0 and m["trainer"]["samples"] == 16 * 8 for m in metrics)
    # With a KL term every sample is trained on; the policy moves away from its reference.
    assert all(m["trainer"]["trained_samples"] == 16 * 8 for m in metrics)
    assert metrics[0]["trainer"]["kl_ref"] == pytest.approx(0.0, abs=1e-6)
    assert metrics[-1]["trainer"]["kl_ref"] > 0
    # Trainers send from the parameters themselves; each update reports its wait for the sends.
    assert all(m["trainer"]["weight_send_stall_s"] >= 0 for m in metrics[1:])
    # The saved policy is the full model gathered from both shards.
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "run" / "policy"))
    assert sum(p.numel() for p in model.parameters()) > 500_000
    # Every rank's timeline holds its start-up phases, in order, and the controller's the stop
    # after its last step (bench/scale.py's startup_s and shutdown_s come from them).
    from launch.tools.trace import read_spans

    ranks = read_spans(tmp_path / "run")
    assert sorted(r["role"] for r in ranks) == ["controller", "generator", "generator", "reward", "trainer", "trainer"]
    phases = ["start.python", "start.preflight", "start.imports", "start.distributed", "start.build"]
    for r in ranks:
        spans = [s for s in r["spans"] if s["name"].startswith("start.")]
        assert [s["name"] for s in spans] == phases, r["role"]
        assert all(a["end"] <= b["start"] + 1e-6 and a["start"] <= a["end"] for a, b in zip(spans, spans[1:]))
        assert r["peak_rss_bytes"] > 50 << 20  # every rank holds at least Python, MPI and numpy
        # Only the ranks that hold a model import torch (the others' start-up is then cheap).
        assert r["torch_imported"] == (r["role"] in ("generator", "trainer")), r["role"]
        assert r["pid"] > 0 and r["host"], r  # how hydra (MPICH) names a dead rank
        first_work = min(
            (s["start"] for s in r["spans"] if not s["name"].startswith(("start.", "stop."))), default=None
        )
        assert first_work is None or first_work >= spans[-1]["end"] - 1e-6, r["role"]
    (controller,) = [r for r in ranks if r["role"] == "controller"]
    assert [s["name"] for s in controller["spans"] if s["name"].startswith("stop.")] == [
        "stop.finish",
        "stop.mailbox_close",
    ]


@pytest.mark.parametrize("generation", [{}, {"dtype": "bfloat16"}], ids=["shared-module", "bf16-copy"])
def test_colocated_ranks_take_turns(tmp_path, sft_model, generation):
    """The DeepSpeed-Chat-like baseline: 2 ranks generate, then train data-parallel, in turn.
    With a generation dtype of their own they sample from a bf16 copy reloaded each step."""
    metrics = run(
        tmp_path,
        sft_model,
        world={"generator": {"ranks": 0, **generation}, "trainer": 0, "colocated": 2},
        run={"steps": 3, "max_staleness": 0},
    )
    assert [m["policy_version"] for m in metrics] == [1, 2, 3]
    assert all(m["staleness_max"] == 0 and m["trainer"]["samples"] == 16 * 8 for m in metrics)
    assert set(metrics[-1]["busy"]) == {"colocated", "reward", "controller"}  # the controller its own loop's share
    gaps = [m["trainer"]["logp_mismatch_mean"] for m in metrics]
    if generation:  # on-policy: the gap is the bf16 copy's, and it follows the trained weights
        assert min(gaps) > 1e-4 and max(gaps) < 0.05
    else:  # the engine samples with the trained module itself
        assert max(gaps) < 1e-4


def test_bfloat16_and_int8_generators_of_a_float32_trainer(tmp_path, sft_model):
    """world.generator.dtype: the generator samples in bf16, the weights travel as bf16 (half
    the bytes of a float32 generator's: the int8 one, which quantizes what it receives in
    float32), and the precision gap is reported each step; likewise for quantization: int8.
    (A float32 generator's gap, about 0, is test_colocated_ranks_take_turns's.)"""
    steps = {"steps": 3, "max_staleness": 0}  # on-policy: the gap is the precision's alone
    bf16 = run(tmp_path / "bf16", sft_model, world={"generator": {"ranks": 1, "dtype": "bfloat16"}}, run=steps)
    int8 = run(tmp_path / "int8", sft_model, world={"generator": {"ranks": 1, "quantization": "int8"}}, run=steps)
    assert [m["policy_version"] for m in bf16] == [m["policy_version"] for m in int8] == [1, 2, 3]
    # The last step pushes nothing (nobody samples after it): compare the steps that push.
    assert int8[0]["weight_sync_bytes"] > 0
    assert [m["weight_sync_bytes"] * 2 for m in bf16[:-1]] == [m["weight_sync_bytes"] for m in int8[:-1]]
    for m in bf16:
        assert m["trainer"]["logp_mismatch_mean"] > 1e-4
        assert m["trainer"]["logp_mismatch_max"] >= m["trainer"]["logp_mismatch_mean"]
    assert min(m["trainer"]["logp_mismatch_mean"] for m in int8) > 1e-3
