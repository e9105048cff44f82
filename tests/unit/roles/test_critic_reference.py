"""The critic's KL penalty: -kl_coef * (log mu - log ref) per response token, against the
frozen starting weights, in micro-batches."""

from __future__ import annotations

import numpy as np
import pytest

from examples.arith.tokens import ALPHABET
from examples.toy.tiny_llama import build_tiny_llama
from roles.algorithm.logprobs import response_logprobs
from roles.critic_reference import KLPenalty
from roles.models import ModelConfig

pytestmark = pytest.mark.timeout(120)


def test_token_rewards_are_the_scaled_log_ratio_to_the_reference(tmp_path):
    folder = build_tiny_llama(tmp_path / "m", ALPHABET, hidden_size=64, num_layers=1, num_heads=1)
    penalty = KLPenalty(ModelConfig(path=str(folder), dtype="float32"), None, 0.5, 1.0, micro_batch=2)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 15, size=n) for n in (3, 5, 2, 4, 6)]
    responses = [rng.integers(3, 15, size=n) for n in (4, 1, 6, 2, 3)]
    ref, _ = response_logprobs(penalty.reference, prompts, responses)
    ref = [row[: len(r)].numpy() for row, r in zip(ref, responses)]
    same = penalty.token_rewards(prompts, responses, ref)  # sampled by the reference itself: no penalty
    assert [len(t) for t in same] == [len(r) for r in responses]
    assert all(np.abs(t).max() < 1e-5 for t in same)
    shifted = penalty.token_rewards(prompts, responses, [r + 1.0 for r in ref])
    assert all(np.allclose(t, -0.5, atol=1e-5) for t in shifted)
