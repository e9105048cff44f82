"""The sim engine (a benchmark instrument): modelled time, the right shapes, the length models."""

from __future__ import annotations

import time

import numpy as np
import pytest

from roles.engines.base import EngineConfig, SamplingConfig
from roles.engines.sim_cost import LengthModel, SimConfig
from roles.engines.sim_engine import SimEngine


def prompts(k: int) -> list[np.ndarray]:
    return [np.arange(3, dtype=np.int32) for _ in range(k)]


def test_a_batch_sleeps_for_its_longest_sample_and_returns_what_a_generator_sends():
    cfg = SimConfig(per_token_s=0.002, per_batch_s=0.01, vocab=50, lengths=LengthModel(kind="fixed", mean=20))
    engine = SimEngine(cfg, seed=0)
    t0 = time.perf_counter()
    groups = engine.generate(prompts(3), 4, SamplingConfig(max_new_tokens=16))
    took = time.perf_counter() - t0
    assert took >= 0.01 + 0.002 * 16  # capped at max_new_tokens: 16, not 20
    assert engine.slept_s == pytest.approx(0.01 + 0.002 * 16)
    assert [len(g) for g in groups] == [4, 4, 4]
    for s in (s for g in groups for s in g):
        assert s.response_ids.dtype == np.int32 and s.logprobs.dtype == np.float32
        assert len(s.response_ids) == len(s.logprobs) == 16 and s.finish_reason == "length"
        assert s.response_ids.min() >= 2 and s.response_ids.max() < 50 and (s.logprobs < 0).all()
    assert engine.tail_wait_s == 0  # every row as long as the longest


def test_a_step_costs_more_the_more_rows_it_decodes():
    cfg = SimConfig(per_token_s=0.0, per_row_token_s=0.0001, lengths=LengthModel(kind="fixed", mean=10))
    engine = SimEngine(cfg, seed=0)
    engine.generate(prompts(2), 5, SamplingConfig(max_new_tokens=10))  # 10 rows
    assert engine.slept_s == pytest.approx(10 * 0.0001 * 10)
    engine.generate(prompts(4), 5, SamplingConfig(max_new_tokens=10))  # 20 rows: twice as long
    assert engine.slept_s == pytest.approx(10 * 0.0001 * 10 * 3)


def test_the_lognormal_lengths_have_the_mean_asked_and_a_long_tail():
    model = LengthModel(kind="lognormal", mean=100, sigma=1.0)
    lengths = model.draw(np.random.default_rng(0), 20_000, cap=100_000)
    assert lengths.mean() == pytest.approx(100, rel=0.05)
    assert np.percentile(lengths, 99) > 5 * np.median(lengths)  # the tail reasoning workloads have
    capped = model.draw(np.random.default_rng(0), 1000, cap=64)
    assert capped.max() == 64 and capped.min() >= 1


def test_rows_that_end_early_wait_for_the_longest_and_that_is_counted():
    cfg = SimConfig(per_token_s=0.0, lengths=LengthModel(kind="uniform", mean=50))
    engine = SimEngine(cfg, seed=1)
    groups = engine.generate(prompts(8), 4, SamplingConfig(max_new_tokens=1000))
    lengths = np.array([len(s.response_ids) for g in groups for s in g])
    assert 1 <= lengths.min() < lengths.max() <= 99
    assert {s.finish_reason for g in groups for s in g} == {"stop"}
    engine.config = SimConfig(per_token_s=0.001, lengths=cfg.lengths)
    engine.generate(prompts(8), 4, SamplingConfig(max_new_tokens=1000))
    assert engine.tail_wait_s > 0


def test_weights_are_taken_and_dropped():
    engine = SimEngine(SimConfig(), seed=0)
    seen = []
    engine.load_weights(seen.append(i) or ("w", i) for i in range(3))
    assert seen == [0, 1, 2] and engine.updates == 1


def test_sim_options_belong_to_the_sim_engine():
    assert EngineConfig(engine="sim").sim == SimConfig()
    with pytest.raises(ValueError, match="sim applies to engine: sim only"):
        EngineConfig(engine="torch", sim={"per_token_s": 0.01})
