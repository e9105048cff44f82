"""A whole asynchronous job on one GPU (bounded in time): controller, vLLM generator on CUDA in
bfloat16, reward and a float32 trainer in processes of their own on one machine. The trainer
runs on the CPU, or on the same GPU as the generator (``world.trainer.device: cuda``): its
shards then go through host memory to the weight transport that runs between two processes on
one device (gloo; NCCL takes one GPU per rank), and the engine copies them onto the device."""

from __future__ import annotations

import importlib.util

import pytest

from launch import recipe
from support.jobs import CONFIG, run_job_capturing

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
@pytest.mark.parametrize(("mode", "trainer"), [("batch", "cpu"), ("stream", "cpu"), ("batch", "cuda")])
def test_an_async_job_samples_on_the_gpu(tmp_path, sft_model, mode, trainer):
    overrides = {
        "model": {"path": str(sft_model)},
        "world": {
            "generator": {"ranks": 1, "engine": "vllm", "dtype": "bfloat16", "gpu_memory_utilization": 0.3},
            "trainer": {"ranks": 1, "device": trainer},
        },
        "rollout": {"mode": mode, "prompts_per_step": 16, "samples_per_prompt": 8},
        "run": {"steps": 6, "max_staleness": 1, "out": str(tmp_path), "progress": False},
    }
    cfg = recipe.write_config(CONFIG, tmp_path, overrides)
    done = run_job_capturing(cfg, {})
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    if trainer == "cuda":
        assert "mpirl: weights: trainers on cuda send through cpu memory" in done.stdout, done.stdout[-3000:]
    metrics = recipe.read_metrics(tmp_path)
    assert [m["policy_version"] for m in metrics] == list(range(1, 7))
    assert sum(m["reward_mean"] for m in metrics) > 0 and max(m["staleness_max"] for m in metrics) <= 1
    gaps = [m["trainer"]["logp_mismatch_mean"] for m in metrics if "logp_mismatch_mean" in m["trainer"]]
    assert gaps and max(gaps) < 0.05  # bf16 on the GPU against the float32 trainer
    print({"trainer": trainer, "step_s": [round(m["step_s"], 3) for m in metrics], "logp_mismatch_mean": gaps})
