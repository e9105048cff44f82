"""roles/engines/torch_stream.py: the torch engine's continuous batching, for real, on a tiny Llama.

What must hold for RL: samples come back as they end; every token's log-prob is the
log-prob of that token under the weights that sampled it (mu), whatever the slot, the
neighbours, the window shifts and the in-flight updates; a sample's draws depend on its seed
alone.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from examples.toy.tiny_llama import TINY, build_tiny_llama
from roles.algorithm.logprobs import response_logprobs
from roles.engines.base import SamplingConfig
from roles.engines.requests import Request, run_to_completion
from roles.engines.torch_engine import TorchEngine

torch.set_num_threads(1)
ALPHABET = "0123456789+-= abcdefghij"


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    return (
        build_tiny_llama(root / "a", ALPHABET, seed=0, **TINY.kwargs()),
        build_tiny_llama(root / "b", ALPHABET, seed=1, **TINY.kwargs()),
    )


def _prompts(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [np.concatenate([[1], rng.integers(3, 3 + len(ALPHABET), n - 1)]).astype(np.int32) for n in lengths]


def _hf(path):
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def _reference_logprobs(model, prompt, sample, temperature=1.0):
    with torch.no_grad():
        lp, _ = response_logprobs(model, [prompt], [sample.response_ids], temperature=temperature)
    return lp[0, : len(sample.response_ids)].numpy()


def _drain(engine, until=None):
    out = []
    while engine.unfinished() and (until is None or not until(out)):
        out += engine.step()
    return out


def test_streamed_log_probs_are_the_models_under_joins_leaves_and_window_shifts(model_dirs):
    # Few slots, prompts of many lengths and requests added while others decode: rows join,
    # leave, move down and the window shifts; every token must still be scored as alone.
    engine = TorchEngine(model_dirs[0], capacity=3)
    hf = _hf(model_dirs[0])
    prompts = _prompts([3, 9, 5, 14, 2, 7], seed=1)
    sampling = SamplingConfig(temperature=0.9, max_new_tokens=24, seed=5)
    done = []
    for i, p in enumerate(prompts[:3]):
        engine.add(Request(i, p, 2, sampling))
    for _ in range(4):
        done += engine.step()
    for i, p in enumerate(prompts[3:], start=3):
        engine.add(Request(i, p, 2, sampling))
    done += _drain(engine)
    assert sorted((f.tag, f.index) for f in done) == [(t, j) for t in range(6) for j in range(2)]
    for f in done:
        ref = _reference_logprobs(hf, prompts[f.tag], f.sample, 0.9)
        np.testing.assert_allclose(f.sample.logprobs, ref, atol=1e-5)
        assert f.sample.versions.tolist() == [0] * len(f.sample.response_ids)


def test_a_short_sample_comes_back_before_a_long_one_ends(model_dirs):
    engine = TorchEngine(model_dirs[0], capacity=8)
    p = _prompts([4, 4])
    engine.add(Request(0, p[0], 1, SamplingConfig(max_new_tokens=30, seed=0)))
    engine.add(Request(1, p[1], 1, SamplingConfig(max_new_tokens=2, seed=0)))
    first = []
    while not first:
        first = engine.step()
    assert [f.tag for f in first] == [1] and engine.unfinished() == 1


def test_a_samples_draws_do_not_depend_on_its_neighbours_or_slots(model_dirs):
    sampling = SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=12, seed=11)
    prompt = _prompts([6], seed=3)[0]
    alone = run_to_completion(TorchEngine(model_dirs[0], capacity=4), [prompt], 3, sampling)[0]
    crowded_engine = TorchEngine(model_dirs[0], capacity=5)
    for i, p in enumerate(_prompts([2, 8, 5], seed=4), start=100):
        crowded_engine.add(Request(i, p, 2, SamplingConfig(temperature=0.7, max_new_tokens=20, seed=i)))
    crowded_engine.step()
    crowded_engine.add(Request(0, prompt, 3, sampling))
    got = {f.index: f.sample for f in _drain(crowded_engine) if f.tag == 0}
    for j in range(3):
        np.testing.assert_array_equal(got[j].response_ids, alone[j].response_ids)
        np.testing.assert_allclose(got[j].logprobs, alone[j].logprobs, atol=1e-5)


def test_greedy_and_sampled_requests_share_a_batch(model_dirs):
    engine = TorchEngine(model_dirs[0], capacity=8)
    prompt = _prompts([5], seed=2)[0]
    batch = engine.generate([prompt], 1, SamplingConfig(temperature=0, max_new_tokens=10))[0][0]
    engine.add(Request(0, prompt, 2, SamplingConfig(temperature=0, max_new_tokens=10)))
    engine.add(Request(1, prompt, 2, SamplingConfig(temperature=1.0, max_new_tokens=10, seed=0)))
    greedy = [f.sample for f in _drain(engine) if f.tag == 0]
    for s in greedy:
        np.testing.assert_array_equal(s.response_ids, batch.response_ids)


@pytest.mark.parametrize("inflight_kv", ["keep", "recompute"])
def test_an_update_mid_generation_gives_later_tokens_the_new_version_and_weights(model_dirs, inflight_kv):
    engine = TorchEngine(model_dirs[0], capacity=4, inflight_kv=inflight_kv)
    old, new = _hf(model_dirs[0]), _hf(model_dirs[1])
    prompts = _prompts([4, 7], seed=6)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=40, seed=2)
    for i, p in enumerate(prompts):
        engine.add(Request(i, p, 2, sampling))
    done = []
    for _ in range(5):
        done += engine.step()
    engine.load_weights(new.state_dict().items(), version=1)
    done += _drain(engine)
    spanning = [f for f in done if 1 in f.sample.versions and 0 in f.sample.versions]
    assert spanning, "no sample was in flight across the update"
    for f in spanning:
        v = f.sample.versions
        cut = int(np.argmax(v == 1))
        assert (v[:cut] == 0).all() and (v[cut:] == 1).all()
        before = _reference_logprobs(old, prompts[f.tag], f.sample)
        after = _reference_logprobs(new, prompts[f.tag], f.sample)
        np.testing.assert_allclose(f.sample.logprobs[:cut], before[:cut], atol=1e-5)
        if inflight_kv == "recompute":  # KV rebuilt: exactly the new weights' log-probs
            np.testing.assert_allclose(f.sample.logprobs[cut:], after[cut:], atol=1e-5)
        else:  # KV kept: later tokens attend to KV of the old weights, so neither matches exactly
            assert not np.allclose(f.sample.logprobs[cut:], before[cut:], atol=1e-4)


def test_abort_drops_what_is_left_of_a_request(model_dirs):
    engine = TorchEngine(model_dirs[0], capacity=2)
    p = _prompts([3, 3, 3])
    for i in range(3):
        engine.add(Request(i, p[i], 2, SamplingConfig(max_new_tokens=50, seed=i)))
    engine.step()
    assert engine.unfinished() == 6
    assert engine.abort(0) == 2 and engine.abort(2) == 2 and engine.abort(99) == 0
    done = _drain(engine)
    assert {f.tag for f in done} == {1} and engine.unfinished() == 0


def test_bad_requests_are_named_before_anything_is_queued(model_dirs):
    engine = TorchEngine(model_dirs[0], capacity=2)
    with pytest.raises(ValueError, match="at least one token"):
        engine.add(Request(0, np.zeros(0, np.int32), 1, SamplingConfig()))
    with pytest.raises(ValueError, match="n >= 1"):
        engine.add(Request(0, _prompts([3])[0], 0, SamplingConfig()))
    assert engine.unfinished() == 0


def test_rows_moved_down_and_windows_shifted_keep_every_log_prob_exact(model_dirs, monkeypatch):
    from roles.engines import slot_cache

    moves = []
    move_row = slot_cache.SlotKV.move_row
    monkeypatch.setattr(slot_cache.SlotKV, "move_row", lambda self, *a: (moves.append(a), move_row(self, *a))[1])
    engine = TorchEngine(model_dirs[0], capacity=16)
    hf = _hf(model_dirs[0])
    rng = np.random.default_rng(1)
    prompts = _prompts(rng.integers(2, 15, 30).tolist(), seed=7)
    for i, p in enumerate(prompts):
        engine.add(Request(i, p, 2, SamplingConfig(max_new_tokens=int(rng.integers(3, 60)), seed=i)))
    done = _drain(engine)
    assert len(done) == 60 and moves, "no row was moved down"
    for f in done:
        np.testing.assert_allclose(f.sample.logprobs, _reference_logprobs(hf, prompts[f.tag], f.sample), atol=1e-5)
