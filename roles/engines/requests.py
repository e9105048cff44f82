"""The request-level engine contract: requests in at any time, each sample out the moment it ends.

A streaming engine runs continuous batching: it admits requests while others decode, a
finished sequence frees its slot for a waiting one, and :meth:`StreamingEngine.step` (one
decode step, or a few) returns the samples that ended in it. New weights are loaded between
steps while sequences are in flight (:meth:`StreamingEngine.load_weights` with the new policy
version): every token records the version that sampled it (``Sample.versions``), and what
becomes of the in-flight sequences' KV cache is the engine's ``inflight_kv``:

- ``keep`` (PipelineRL): sequences go on attending to the KV their old weights computed;
- ``recompute`` (AReaL): their KV is rebuilt from the new weights (prompt and tokens so far
  prefilled again) before they decode on.

Either way no *new* request is ever served KV computed with older weights (the torch engine
shares no cache between requests; vLLM's prefix cache is salted with the version).

Sampling is reproducible per sample, whatever else is in the batch: sample ``j`` of a request
seeded ``s`` draws from :func:`sample_seed` (s, j) alone, so which engine, which slot or which
neighbours it decoded with changes nothing (only an in-flight update, by changing the weights,
changes what it samples).

``run_to_completion`` drives a streaming engine over a list of prompts and returns what
``Engine.generate`` returns, for callers that want a whole batch (evaluation, benchmarks).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from roles.engines.base import Sample, SamplingConfig

if TYPE_CHECKING:
    import torch

InflightKV = Literal["keep", "recompute"]
INFLIGHT_KV: tuple[str, ...] = ("keep", "recompute")


@dataclass
class Request:
    """``n`` samples of one prompt; ``tag`` names it in what comes back (unique among live requests)."""

    tag: int
    prompt_ids: np.ndarray  # int32 token ids, at least one
    n: int
    sampling: SamplingConfig  # sampling.seed seeds the request (None: nondeterministic)


@dataclass
class Finished:
    """Sample ``index`` (of ``n``) of request ``tag``, ended ("stop" or "length")."""

    tag: int
    index: int
    sample: Sample  # with ``versions``: the policy version of each token


class StreamingEngine(Protocol):
    capacity: int  # sequences decoded at once; more wait in the engine's queue
    version: int  # policy version of the weights it holds (the last load_weights's)

    def add(self, request: Request) -> None:
        """Queue ``request``; its samples join the running batch as slots free."""
        ...

    def step(self) -> list[Finished]:
        """Decode (admitting waiting sequences first); the samples that ended in this step."""
        ...

    def abort(self, tag: int) -> int:
        """Drop what is left of request ``tag`` (finished samples already returned stay
        returned); the number of unfinished samples dropped. An unknown tag drops nothing."""
        ...

    def unfinished(self) -> int:
        """Sequences admitted or waiting that have not ended."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None = None) -> None:
        """New weights between steps, in flight; tokens sampled from now on carry ``version``
        (None: the version held, plus one). In-flight sequences continue (``inflight_kv``)."""
        ...


def sample_seed(request_seed: int, index: int) -> int:
    """The seed of sample ``index`` of a request seeded ``request_seed``: a hash, so that
    requests with consecutive seeds share no sample's random draws."""
    state = np.random.SeedSequence([request_seed & (2**64 - 1), index, 0x5EED]).generate_state(1, np.uint64)
    return int(state[0] >> 1)


def check_sampling(s: SamplingConfig) -> None:
    """The sampling errors every engine names the same way."""
    if s.temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {s.temperature}")
    if not 0 < s.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {s.top_p}")
    if s.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {s.max_new_tokens}")


def check_request(request: Request) -> None:
    """The request errors every engine names the same way, before anything is queued."""
    check_sampling(request.sampling)
    if request.n < 1:
        raise ValueError(f"a request needs n >= 1 samples, got {request.n}")
    if len(request.prompt_ids) == 0:
        raise ValueError("every prompt needs at least one token")


def version_segments(versions: np.ndarray) -> np.ndarray:
    """Per-token versions as segments: int32 ``[k, 2]`` rows of (first token index, version),
    one per run of equal versions (what a rollout carries; :func:`expand_segments` undoes it)."""
    versions = np.asarray(versions)
    if len(versions) == 0:
        return np.zeros((0, 2), np.int32)
    starts = np.flatnonzero(np.r_[True, versions[1:] != versions[:-1]])
    return np.stack([starts, versions[starts]], axis=1).astype(np.int32)


def expand_segments(segments: np.ndarray, length: int) -> np.ndarray:
    """The per-token versions of a sample of ``length`` tokens from its segments."""
    segments = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    out = np.empty(length, np.int32)
    for i, (start, version) in enumerate(segments):
        end = segments[i + 1, 0] if i + 1 < len(segments) else length
        out[start:end] = version
    return out


def run_to_completion(
    engine: StreamingEngine, prompts: list[np.ndarray], n: int, sampling: SamplingConfig
) -> list[list[Sample]]:
    """``Engine.generate`` over a streaming engine: prompt ``i`` is request ``i``, seeded
    ``sampling.seed + i`` when a seed is given; result[i][j] is sample j of prompt i."""
    out: list[list[Sample | None]] = [[None] * n for _ in prompts]
    for i, prompt in enumerate(prompts):
        seed = None if sampling.seed is None else sampling.seed + i
        engine.add(
            Request(tag=i, prompt_ids=np.asarray(prompt, dtype=np.int32), n=n, sampling=_with_seed(sampling, seed))
        )
    left = len(prompts) * n
    while left:
        for f in engine.step():
            out[f.tag][f.index] = f.sample
            left -= 1
    return out  # type: ignore[return-value]


def _with_seed(sampling: SamplingConfig, seed: int | None) -> SamplingConfig:
    return SamplingConfig(sampling.temperature, sampling.top_p, sampling.max_new_tokens, seed)
