"""A benchmark instrument, not a generator: the ``sim`` engine models generation time and returns
samples of the right shapes, so the control plane can be measured at more generator ranks
than a machine has cores (``bench/scale.py``).

A batch of ``r`` rows costs ``per_batch_s + (per_token_s + r x per_row_token_s) x (its longest
response)``: an engine decodes a batch step by step until its longest sample ends, so every row
waits for the longest one, and a step costs more the more rows it decodes. The
engine *sleeps* that long (it uses no CPU, which is what lets 32 of them share 2 cores).
Response lengths are drawn per sample from ``lengths`` (fixed, uniform, or a long-tailed
lognormal like reasoning workloads'), capped at ``max_new_tokens``. Token ids are uniform over
``vocab`` (EOS is never drawn: a sample ends by reaching its drawn length, reported as "stop",
or the cap, "length"); log-probs are uniform in [-3, 0).

Everything around it is real: the generator rank's loop, the weights it receives (it takes
them and drops them), the rewards, the controller. Select it with ``world.generator.engine:
sim`` and its ``world.generator.sim`` section; never for training a model.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

from roles.engines.base import Sample, SamplingConfig
from roles.engines.sim_cost import SimConfig


class SimEngine:
    """The ``sim`` engine (see the module docstring)."""

    def __init__(self, config: SimConfig, seed: int = 0):
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.batches = 0
        self.slept_s = 0.0  # modelled time so far
        self.tail_wait_s = 0.0  # of it, rows waiting for their batch's longest sample (row-seconds / rows)
        self.updates = 0

    @classmethod
    def from_config(cls, engine, model, *, max_seqs: int, seed: int = 0, module=None, stop_ids=None) -> SimEngine:
        """The engine of a role map's ``world.generator`` (its ``sim`` section); it loads no model."""
        return cls(engine.sim, seed=seed)

    def generate(self, prompts: list[np.ndarray], n: int, sampling: SamplingConfig) -> list[list[Sample]]:
        if not prompts:
            return []
        cfg = self.config
        lengths = cfg.lengths.draw(self.rng, len(prompts) * n, sampling.max_new_tokens)
        longest = int(lengths.max())
        step_s = cfg.per_token_s + cfg.per_row_token_s * len(lengths)
        modelled = cfg.per_batch_s + step_s * longest
        self.batches += 1
        self.slept_s += modelled
        # The share of the batch's decode time each row spends finished, waiting for the longest.
        self.tail_wait_s += step_s * float(np.mean(longest - lengths))
        if modelled > 0:
            time.sleep(modelled)
        out, k = [], 0
        for _ in prompts:
            group = []
            for _ in range(n):
                t = int(lengths[k])
                k += 1
                group.append(
                    Sample(
                        response_ids=self.rng.integers(2, cfg.vocab, t, dtype=np.int32),
                        logprobs=self.rng.uniform(-3.0, 0.0, t).astype(np.float32),
                        finish_reason="length" if t >= sampling.max_new_tokens else "stop",
                    )
                )
            out.append(group)
        return out

    def load_weights(self, named_tensors: Iterable) -> None:
        """Take the pushed weights and drop them (the handshake and the bytes are what is measured)."""
        for _ in named_tensors:
            pass
        self.updates += 1
