"""roles.engines.vllm_engine.request_seed: vLLM seeds sample j of a request with its seed + j,
so the requests of all batches must take seed ranges that never overlap, reproducibly."""

from __future__ import annotations

from roles.engines.vllm_engine import request_seed
from roles.protocol import batch_seed


def test_no_sample_of_a_run_shares_a_seed_with_another():
    samples_per_prompt, prompts_per_batch = 8, 16
    seen = set()
    for batch_id in range(200):  # consecutive batch seeds, as the controller gives them
        seed = batch_seed(0, batch_id)
        for i in range(prompts_per_batch):
            first = request_seed(seed, i)
            assert 0 <= first < 2**63  # room for vLLM's + j within 64 bits
            seen.update(range(first, first + samples_per_prompt))
    assert len(seen) == 200 * prompts_per_batch * samples_per_prompt


def test_the_seeds_are_reproducible_and_depend_on_both():
    assert request_seed(12345, 3) == request_seed(12345, 3)
    assert len({request_seed(12345, 3), request_seed(12346, 3), request_seed(12345, 4)}) == 3
    assert request_seed(-5, 0) >= 0  # a negative batch seed still gives a valid vLLM seed
