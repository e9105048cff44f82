"""The generators' engines on a GPU: the torch engine samples on CUDA with the log-probs the
trainer computes; vLLM's CUDA engine in bfloat16 and fp8 reloads weights in place from CUDA
tensors (as a weight sync leaves them) and reports log-probs near the trainer's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roles.algorithm.logprobs import response_logprobs
from roles.engines.base import SamplingConfig
from support.tiny_models import tiny_llama

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]
PROMPTS = [np.array([1, 5, 7, 3], np.int32), np.array([1, 9], np.int32)]  # ids in both tiny models' vocabularies


def _gaps(model, prompts, samples) -> list[float]:
    """Per sample, the largest |log pi - log mu| over its tokens (pi: ``model`` on the CPU, float32)."""
    flat = [(p, s) for p, group in zip(prompts, samples) for s in group]
    logp, _ = response_logprobs(model.float().cpu(), [p for p, _ in flat], [s.response_ids for _, s in flat], 1.0)
    return [
        float(np.abs(logp[i, : len(s.response_ids)].detach().numpy() - s.logprobs).max())
        for i, (_, s) in enumerate(flat)
    ]


def test_the_torch_engine_samples_on_cuda_with_the_trainers_log_probs():
    from roles.engines.torch_engine import TorchEngine

    model = tiny_llama()
    engine = TorchEngine(tiny_llama().cuda(), device="cuda", capacity=8)
    samples = engine.generate(PROMPTS, 4, SamplingConfig(temperature=1.0, max_new_tokens=12, seed=0))
    assert max(_gaps(model, PROMPTS, samples)) < 1e-3  # CUDA float32 kernels against the CPU's


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from examples.toy.tiny_llama import TINY, build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny"), "0123456789+-= abcdefghij", **TINY.kwargs(), seed=0)


@pytest.mark.parametrize("quantization, bound", [(None, 0.05), ("fp8", 0.5)], ids=["bf16", "fp8"])
def test_vllm_on_cuda_reloads_from_cuda_tensors_in_place(model_dir, quantization, bound):
    pytest.importorskip("vllm")
    from transformers import AutoModelForCausalLM

    from roles.engines.vllm_engine import VllmEngine

    cfg = VllmEngine.Config(
        model=str(model_dir), dtype="bfloat16", quantization=quantization, gpu_memory_utilization=0.2, seed=0
    )
    engine = VllmEngine(cfg)
    trained = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():  # other weights: the sync must change what vLLM samples with
        for p in trained.parameters():
            p.add_(0.02 * torch.randn_like(p))
    engine.load_weights([(n, p.detach().cuda()) for n, p in trained.named_parameters()], version=1)
    samples = engine.generate(PROMPTS, 4, SamplingConfig(temperature=1.0, max_new_tokens=12, seed=0))
    assert engine.version == 1 and max(_gaps(trained, PROMPTS, samples)) < bound
