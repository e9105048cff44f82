"""Held-out greedy accuracy: the one routine both demos report their figures with.

Responses are decoded greedily by the library's torch engine, the decoder the RL job's own
eval uses; the caller says how a response is scored (each demo keeps its own rule).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import numpy as np

from roles.engines.base import SamplingConfig


def greedy_accuracy(
    model,
    prompts: Mapping[Hashable, np.ndarray],
    score: Callable[[Hashable, np.ndarray], float],
    max_new_tokens: int,
) -> float:
    """Mean ``score(key, response_ids)`` over ``prompts`` (key -> prompt token ids), 0.0 for none.

    Each response is the greedy continuation of its prompt, up to EOS or ``max_new_tokens``.
    """
    from roles.engines.torch_engine import TorchEngine

    was_training = model.training
    # The engine uses the model as is (shared weights) and puts it in eval mode.
    samples = TorchEngine(model).generate(
        list(prompts.values()), 1, SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens)
    )
    model.train(was_training)
    scores = [score(key, s[0].response_ids) for key, s in zip(prompts, samples)]
    return float(np.mean(scores)) if scores else 0.0
