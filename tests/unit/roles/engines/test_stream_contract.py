"""The request-level contract (roles/engines/requests.py), the same tests for every engine.

Each engine is built small (a tiny Llama for torch and vLLM, the sim's modelled time kept
short); vLLM's case is skipped where it is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from examples.toy.tiny_llama import TINY, build_tiny_llama
from roles.engines.base import SamplingConfig
from roles.engines.requests import Request, expand_segments, run_to_completion, version_segments
from roles.engines.sim_cost import LengthModel, SimConfig
from roles.engines.sim_engine import SimEngine
from roles.engines.torch_engine import TorchEngine

torch.set_num_threads(1)
ALPHABET = "0123456789+-= abcdefghij"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("contract"), ALPHABET, seed=0, **TINY.kwargs())


def _torch(model_dir):
    return TorchEngine(model_dir, capacity=4)


def _sim(model_dir):
    cfg = SimConfig(per_token_s=0.0001, vocab=30, lengths=LengthModel(kind="lognormal", mean=8, sigma=1.0))
    return SimEngine(cfg, seed=0, capacity=4)


def _vllm(model_dir):
    pytest.importorskip("vllm", reason="vllm is not installed")
    from roles.engines.vllm_engine import VllmEngine

    return VllmEngine(VllmEngine.Config(model=str(model_dir), kv_cache_gib=0.25, max_num_seqs=4, block_size=32))


ENGINES = {"torch": _torch, "sim": _sim, "vllm": _vllm}


@pytest.fixture(params=list(ENGINES))
def engine(request, model_dir):
    return ENGINES[request.param](model_dir)


def _prompts(k, seed=0):
    rng = np.random.default_rng(seed)
    return [np.concatenate([[1], rng.integers(3, 3 + len(ALPHABET), 3 + i)]).astype(np.int32) for i in range(k)]


def _drain(engine):
    out = []
    for _ in range(10_000):
        if not engine.unfinished():
            return out
        out += engine.step()
    raise AssertionError("the engine never finished its requests")


def test_every_sample_comes_back_once_with_its_tokens_versions(engine):
    prompts = _prompts(5)
    for i, p in enumerate(prompts):  # more samples than slots: some wait
        engine.add(Request(i, p, 3, SamplingConfig(max_new_tokens=12, seed=i)))
    assert engine.unfinished() == 15
    done = _drain(engine)
    assert sorted((f.tag, f.index) for f in done) == [(i, j) for i in range(5) for j in range(3)]
    for f in done:
        s = f.sample
        assert 1 <= len(s.response_ids) <= 12 and len(s.logprobs) == len(s.response_ids) == len(s.versions)
        assert s.finish_reason in ("stop", "length") and (s.versions == engine.version).all()


def test_a_short_request_ends_before_a_long_one_started_with_it(engine):
    p = _prompts(2)
    engine.add(Request(0, p[0], 1, SamplingConfig(max_new_tokens=40, seed=0)))
    engine.add(Request(1, p[1], 1, SamplingConfig(max_new_tokens=1, seed=0)))
    first = []
    while not first:
        first = engine.step()
    assert [f.tag for f in first] == [1]
    engine.abort(0)


def test_aborted_samples_never_come_back(engine):
    p = _prompts(3)
    for i in range(3):
        engine.add(Request(i, p[i], 2, SamplingConfig(max_new_tokens=60, seed=i)))
    engine.step()
    dropped = engine.abort(1)
    assert 0 < dropped <= 2 and engine.abort(1) == 0
    assert all(f.tag != 1 for f in _drain(engine))


def test_tokens_after_an_update_in_flight_carry_the_new_version(engine):
    p = _prompts(2)
    for i in range(2):
        engine.add(Request(i, p[i], 2, SamplingConfig(max_new_tokens=60, temperature=1.0, seed=i)))
    done = engine.step() + engine.step()
    start = engine.version
    engine.load_weights(_same_weights(engine), version=start + 1)
    done += _drain(engine)
    for f in done:
        v = f.sample.versions
        assert (np.diff(v) >= 0).all() and set(v.tolist()) <= {start, start + 1}
    assert any(f.sample.versions[-1] == start + 1 for f in done)


def test_run_to_completion_returns_what_generate_returns(engine):
    out = run_to_completion(engine, _prompts(3), 2, SamplingConfig(max_new_tokens=8, seed=3))
    assert [len(g) for g in out] == [2, 2, 2] and all(s is not None for g in out for s in g)


def test_version_segments_round_trip():
    v = np.array([3, 3, 4, 4, 4, 6], np.int32)
    seg = version_segments(v)
    assert seg.tolist() == [[0, 3], [2, 4], [5, 6]]
    np.testing.assert_array_equal(expand_segments(seg, len(v)), v)
    assert version_segments(np.zeros(0, np.int32)).shape == (0, 2)


def _same_weights(engine):
    """The engine's own weights (an update that changes only the version)."""
    if isinstance(engine, TorchEngine):
        return [(n, t.detach().clone()) for n, t in engine.model.state_dict().items()]
    if isinstance(engine, SimEngine):
        return []
    from safetensors.torch import load_file

    return list(load_file(next(__import__("pathlib").Path(engine.config.model).glob("*.safetensors"))).items())
