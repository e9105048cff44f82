"""The torch engine's streaming path on a CUDA device (skipped without one): the GPU check.

Run on a machine with a GPU: ``python -m pytest tests/gpu -q``. What must hold there as on
the CPU: every streamed token's log-prob is the model's under the weights that sampled it
(float32; TF32 off so the comparison is exact to float32 rounding), through joins, leaves,
window shifts and an in-flight update with the KV recomputed; a bfloat16 engine streams with
finite log-probs; and continuous batching beats the batch loop on a long-tailed workload.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from examples.toy.tiny_llama import build_tiny_llama  # noqa: E402
from roles.algorithm.logprobs import response_logprobs  # noqa: E402
from roles.engines.base import SamplingConfig  # noqa: E402
from roles.engines.requests import Request  # noqa: E402
from roles.engines.torch_engine import TorchEngine  # noqa: E402

ALPHABET = "0123456789+-= abcdefghij"
SIZE = dict(hidden_size=256, intermediate_size=688, num_layers=4, num_heads=8)


@pytest.fixture(scope="module", autouse=True)
def exact_float32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda")
    a = build_tiny_llama(root / "a", ALPHABET, seed=0, max_position_embeddings=512, **SIZE)
    b = build_tiny_llama(root / "b", ALPHABET, seed=1, max_position_embeddings=512, **SIZE)
    return a, b


def _prompts(k, seed=0):
    rng = np.random.default_rng(seed)
    return [np.concatenate([[1], rng.integers(3, 27, int(rng.integers(2, 30)))]).astype(np.int32) for _ in range(k)]


def _hf(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).to("cuda").eval()


def _ref(model, prompt, ids):
    with torch.no_grad():
        lp, _ = response_logprobs(model, [prompt], [ids])
    return lp[0, : len(ids)].float().cpu().numpy()


def test_streamed_log_probs_match_the_model_through_an_inflight_recompute(model_dirs):
    engine = TorchEngine(model_dirs[0], device="cuda", capacity=16, inflight_kv="recompute")
    old, new = _hf(model_dirs[0]), _hf(model_dirs[1])
    prompts = _prompts(24)
    for i, p in enumerate(prompts):
        engine.add(Request(i, p, 2, SamplingConfig(max_new_tokens=int(8 + 10 * (i % 7)), seed=i)))
    done = []
    for _ in range(12):
        done += engine.step()
    engine.load_weights(new.state_dict().items(), version=1)
    while engine.unfinished():
        done += engine.step()
    assert len(done) == 48
    worst = 0.0
    for f in done:
        v, ids, lp = f.sample.versions, f.sample.response_ids, f.sample.logprobs
        cut = int(np.argmax(v == 1)) if (v == 1).any() else len(v)
        if cut:
            worst = max(worst, float(np.abs(lp[:cut] - _ref(old, prompts[f.tag], ids)[:cut]).max()))
        if cut < len(v):
            worst = max(worst, float(np.abs(lp[cut:] - _ref(new, prompts[f.tag], ids)[cut:]).max()))
    print(f"largest |mu - log pi| on CUDA: {worst:.2e}")
    assert worst < 1e-4


def test_a_bfloat16_engine_streams(model_dirs):
    engine = TorchEngine(model_dirs[0], device="cuda", dtype=torch.bfloat16, capacity=8)
    for i, p in enumerate(_prompts(6, seed=3)):
        engine.add(Request(i, p, 2, SamplingConfig(max_new_tokens=40, seed=i)))
    done = []
    while engine.unfinished():
        done += engine.step()
    assert len(done) == 12 and all(np.isfinite(f.sample.logprobs).all() for f in done)


def test_continuous_batching_beats_the_batch_loop_on_long_tails(model_dirs):
    # A random model ends at EOS about once in 27 tokens: geometric, long-tailed lengths, the
    # same distribution in both modes (capped at 300); 64 sequences decode at once in each.
    engine = TorchEngine(model_dirs[0], device="cuda", capacity=64)
    prompts = _prompts(256, seed=5)
    sampling = SamplingConfig(max_new_tokens=300, seed=0)

    def batch():
        out = []
        for start in range(0, len(prompts), 64):
            out += [g[0] for g in engine.generate(prompts[start : start + 64], 1, sampling)]
        return out

    def stream():
        for i, p in enumerate(prompts):
            engine.add(Request(i, p, 1, SamplingConfig(max_new_tokens=300, seed=i)))
        out = []
        while engine.unfinished():
            out += [f.sample for f in engine.step()]
        return out

    rates = {}
    for name, fn in (("batch", batch), ("stream", stream)) * 2:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        samples = fn()
        torch.cuda.synchronize()
        took = time.perf_counter() - t0
        tokens = sum(len(s.response_ids) for s in samples)
        rates.setdefault(name, []).append((len(samples) / took, tokens / took))
    print({k: [(round(a, 1), round(b)) for a, b in v] for k, v in rates.items()})
    assert max(r[0] for r in rates["stream"]) > max(r[0] for r in rates["batch"])
