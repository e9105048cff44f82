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

Streaming (``roles.engines.requests``): requests join a running batch of at most ``capacity``
rows; a decode step of ``r`` rows costs ``per_token_s + r x per_row_token_s``, and an admission
``per_batch_s`` times the share of the capacity it fills. A ``step`` sleeps until the next
sample ends (at most ``MAX_STEPS_AT_ONCE`` decode steps, so weights can land in between).

Everything around it is real: the generator rank's loop, the weights it receives (it takes
them and drops them), the rewards, the controller. Select it with ``world.generator.engine:
sim`` and its ``world.generator.sim`` section; never for training a model.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

from roles.engines.base import Sample, SamplingConfig
from roles.engines.requests import Finished, Request, check_request
from roles.engines.sim_cost import SimConfig

MAX_STEPS_AT_ONCE = 64  # decode steps one streaming ``step`` may model at once (weights land between)


class SimEngine:
    """The ``sim`` engine (see the module docstring)."""

    def __init__(self, config: SimConfig, seed: int = 0, capacity: int = 64):
        self.config = config
        self.capacity = capacity
        self.version = 0
        self._waiting: list[list] = []  # streaming: [tag, index, length, max_new_tokens] not yet admitted
        self._running: list[list] = []  # [tag, index, length, tokens done, [(token, version)]]
        self.rng = np.random.default_rng(seed)
        self.batches = 0
        self.slept_s = 0.0  # modelled time so far
        self.tail_wait_s = 0.0  # of it, rows waiting for their batch's longest sample (row-seconds / rows)
        self.updates = 0

    @classmethod
    def from_config(cls, engine, model, *, max_seqs: int, seed: int = 0, module=None, stop_ids=None) -> SimEngine:
        """The engine of a role map's ``world.generator`` (its ``sim`` section); it loads no model."""
        return cls(engine.sim, seed=seed, capacity=engine.max_seqs or max(max_seqs, 1))

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

    def load_weights(self, named_tensors: Iterable, version: int | None = None) -> None:
        """Take the pushed weights and drop them (the handshake and the bytes are what is measured)."""
        for _ in named_tensors:
            pass
        self.updates += 1
        self.version = self.version + 1 if version is None else version

    # ------------------------------------------------------------------ streaming

    def add(self, request: Request) -> None:
        check_request(request)
        cap = request.sampling.max_new_tokens
        for j, length in enumerate(self.config.lengths.draw(self.rng, request.n, cap).tolist()):
            self._waiting.append([request.tag, j, length, cap])

    def abort(self, tag: int) -> int:
        before = self.unfinished()
        self._waiting = [w for w in self._waiting if w[0] != tag]
        self._running = [r for r in self._running if r[0] != tag]
        return before - self.unfinished()

    def unfinished(self) -> int:
        return len(self._waiting) + len(self._running)

    def step(self) -> list[Finished]:
        cfg = self.config
        room = self.capacity - len(self._running)
        admitted, self._waiting = self._waiting[:room], self._waiting[room:]
        modelled = cfg.per_batch_s * len(admitted) / self.capacity
        self._running += [[tag, j, length, cap, 0, []] for tag, j, length, cap in admitted]
        if not self._running:
            return []
        steps = min(MAX_STEPS_AT_ONCE, min(r[2] - r[4] for r in self._running))
        modelled += (cfg.per_token_s + cfg.per_row_token_s * len(self._running)) * steps
        self.slept_s += modelled
        if modelled > 0:
            time.sleep(modelled)
        done, still = [], []
        for r in self._running:
            r[4] += steps
            r[5].append((r[4] - steps, self.version))
            if r[4] < r[2]:
                still.append(r)
                continue
            tag, j, length, cap, _, segments = r
            versions = np.empty(length, np.int32)
            for start, version in segments:
                versions[start:] = version
            sample = Sample(
                response_ids=self.rng.integers(2, cfg.vocab, length, dtype=np.int32),
                logprobs=self.rng.uniform(-3.0, 0.0, length).astype(np.float32),
                finish_reason="length" if length >= cap else "stop",
                versions=versions,
            )
            done.append(Finished(tag, j, sample))
        self._running = still
        return done
