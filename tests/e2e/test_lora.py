"""LoRA end to end (bounded in time): adapter-only weight syncs from 1 and 2 (FSDP2) trainers,
the generator's log-probs those of the trainer's model, the saved policy merged, and the
checkpoint exported as a PEFT adapter folder that PEFT loads. (Exact resume of a LoRA run:
tests/e2e/test_resume.py.)"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S
from support.paths import REPO

pytestmark = pytest.mark.timeout(900)
LORA = {"rank": 4, "alpha": 8.0}
STEPS = 4


def _adapter_bytes(model_dir) -> int:
    from roles.models.loading import load_complete
    from roles.models.lora import LoraConfig, inject_lora, is_adapter

    model = inject_lora(load_complete(model_dir, torch.float32), LoraConfig(**LORA))
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters() if is_adapter(n))


@pytest.mark.slow
@pytest.mark.parametrize("trainers", [1, 2])
def test_adapter_only_syncs_keep_the_generator_on_the_trainers_policy(tmp_path, sft_model, trainers):
    overrides = {
        "model": {"path": str(sft_model), "lora": LORA},
        "world": {"trainer": trainers},
        "rollout": {"prompts_per_step": 8, "samples_per_prompt": 4},
        "algorithm": {"lr": 1e-3},
        "checkpoint": {"every_steps": 2},
        "run": {"steps": STEPS, "max_staleness": 0, "out": str(tmp_path), "progress": False},
    }
    cfg = recipe.write_config(CONFIG, tmp_path, overrides)
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True)
    metrics = recipe.read_metrics(tmp_path)
    assert [m["step"] for m in metrics] == list(range(STEPS))
    adapters = _adapter_bytes(sft_model)
    pushed = [m["weight_sync_bytes"] for m in metrics[:-1]]  # the last step pushes nothing
    assert pushed == [adapters] * (STEPS - 1)  # the adapters, and nothing of the base
    # At staleness 0 the generator samples with the very adapters the trainer holds: its
    # log-probs are the trainer's (LoRA forward over the same frozen base, float32).
    gaps = [m["trainer"]["logp_mismatch_max"] for m in metrics if m["trainer"].get("trained_tokens")]
    assert gaps and max(gaps) < 1e-5, gaps

    import peft
    from transformers import AutoModelForCausalLM

    # The saved policy is the merged model; the checkpoint's adapters, loaded by PEFT, compute it.
    folder = tmp_path / "adapter"
    cli = [sys.executable, "-m", "launch.cli", "export", "--adapter", str(tmp_path / "checkpoints"), str(folder)]
    subprocess.run(cli, check=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "policy"), dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(str(sft_model), dtype=torch.float32)
    with_adapter = peft.PeftModel.from_pretrained(base, str(folder))
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    assert torch.allclose(with_adapter(ids).logits, merged(ids).logits, atol=1e-5)
    assert not torch.allclose(AutoModelForCausalLM.from_pretrained(str(sft_model))(ids).logits, merged(ids).logits)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (make test installs it)")
@pytest.mark.parametrize("lora_mode", [None, "native"])
def test_a_vllm_generator_takes_the_adapters(tmp_path, sft_model, lora_mode):
    """The vLLM generator merges each sync's adapters into its copy of the base and reloads (the
    default, ``lora_mode: merged``: roles.engines.adapter_merge) or applies them with vLLM's own
    LoRA (``native``: roles.engines.vllm_lora); the trainers send the adapters only."""
    generator = {"ranks": 1, "engine": "vllm", **({"lora_mode": lora_mode} if lora_mode else {})}
    overrides = {
        "model": {"path": str(sft_model), "lora": LORA},
        "world": {"generator": generator},
        "rollout": {"prompts_per_step": 8, "samples_per_prompt": 4},
        "algorithm": {"lr": 1e-3},
        "run": {"steps": STEPS, "max_staleness": 0, "out": str(tmp_path), "progress": False},
    }
    cfg = recipe.write_config(CONFIG, tmp_path, overrides)
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True)
    metrics = recipe.read_metrics(tmp_path)
    assert [m["weight_sync_bytes"] for m in metrics[:-1]] == [_adapter_bytes(sft_model)] * (STEPS - 1)
    gaps = [m["trainer"]["logp_mismatch_max"] for m in metrics if m["trainer"].get("trained_tokens")]
    assert gaps and max(gaps) < 1e-3, gaps  # vLLM's CPU kernels against torch's, float32

    # The saved policy (the merged model, a plain Hugging Face folder) is what vLLM loads.
    import numpy as np
    from transformers import AutoModelForCausalLM

    from roles.algorithm.logprobs import response_logprobs
    from roles.engines.base import SamplingConfig
    from roles.engines.vllm_engine import VllmEngine

    engine = VllmEngine(VllmEngine.Config(model=str(tmp_path / "policy"), kv_cache_gib=0.25, max_num_seqs=8, seed=0))
    prompt = np.array([1, 5, 7, 3], np.int32)
    (samples,) = engine.generate([prompt], 2, SamplingConfig(temperature=1.0, max_new_tokens=6, seed=0))
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "policy"), dtype=torch.float32)
    logp, _ = response_logprobs(merged, [prompt] * 2, [s.response_ids for s in samples], 1.0)
    for row, s in enumerate(samples):
        assert np.allclose(logp[row, : len(s.response_ids)].detach().numpy(), s.logprobs, atol=1e-3)
