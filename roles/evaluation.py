"""Evaluation during training: which prompts an eval round sends, and what its results mean.

A round evaluates one policy version on the first ``eval.examples`` examples of the task's
eval split: one greedy response per example (temperature 0: pass@1) and, with
``eval.samples: k``, k sampled responses per example (mean@k, and pass@j for j = 1, 2, 4, ..
up to k with the unbiased estimator of Chen et al. 2021). The controller builds the round's
batches here and feeds it the ``EvalScored`` notices; it knows nothing of generators or
rewards beyond those notices.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from roles import protocol
from roles.protocol import EVAL_GREEDY, EVAL_SAMPLED, EvalScored
from roles.sections.evaluation import EvalConfig  # noqa: F401 - the eval: section, beside the rounds it configures


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # The product form avoids huge binomials: prod_{i=n-c+1}^{n} (1 - k / i).
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def ks_for(samples: int) -> list[int]:
    """The k of pass@k reported for ``samples`` draws: powers of two below it, and itself."""
    ks = [2**i for i in range(int(math.log2(samples)) + 1) if 2**i < samples] if samples > 1 else []
    return ks + [samples] if samples >= 1 else []


@dataclass
class EvalRound:
    """One evaluation in flight: the notices expected and those received."""

    round: int
    policy_version: int  # the version asked for (generators may sample with a newer one)
    step: int  # optimizer steps done when it was asked for
    example_ids: list[int]
    samples: int  # k (0: greedy only)
    started: float = field(default_factory=time.perf_counter)
    greedy: dict[int, EvalScored] = field(default_factory=dict)
    sampled: dict[int, EvalScored] = field(default_factory=dict)
    generate_s: float = 0.0  # generator seconds spent on this round's batches

    @property
    def expected(self) -> int:
        return len(self.example_ids) * (2 if self.samples else 1)

    @property
    def done(self) -> bool:
        return len(self.greedy) + len(self.sampled) >= self.expected

    def batches(self, prompts: dict, batch_rows: int, ev: EvalConfig, first_group: int) -> list[dict]:
        """The ``PromptBatch`` fields of the round's batches: greedy responses, and ``eval.samples``
        sampled ones, per example; group ids from ``first_group``. A batch holds about
        ``batch_rows`` responses, as a training batch does (prompts x samples): sized by prompts,
        a greedy pass would decode a training batch's prompts one row each, and run several
        times slower per token on an engine that decodes a batch's rows together."""
        passes = [(EVAL_GREEDY, 1, 0.0)] + ([(EVAL_SAMPLED, ev.samples, ev.temperature)] if ev.samples else [])
        ids, out = self.example_ids, []
        batches = [(p, start) for p in passes for start in range(0, len(ids), max(1, batch_rows // p[1]))]
        for index, ((purpose, n, temperature), start) in enumerate(batches):
            chunk = ids[start : start + max(1, batch_rows // n)]
            out.append(
                dict(
                    batch_id=protocol.eval_batch_id(self.round, index, len(batches)),
                    step=self.step,
                    min_version=self.policy_version,
                    example_ids=chunk,
                    group_ids=protocol.eval_group_ids(first_group, len(chunk)),
                    prompts=[prompts[i] for i in chunk],
                    samples_per_prompt=n,
                    purpose=purpose,
                    eval_round=self.round,
                    temperature=temperature,
                    max_new_tokens=ev.max_new_tokens,
                )
            )
            first_group += len(chunk)
        return out

    def add(self, m: EvalScored) -> None:
        into = self.greedy if m.purpose == EVAL_GREEDY else self.sampled
        if m.purpose not in (EVAL_GREEDY, EVAL_SAMPLED) or m.example_id in into:
            raise RuntimeError(f"eval round {self.round}: unexpected {m.purpose} result for example {m.example_id}")
        into[m.example_id] = m

    def metrics(self) -> dict:
        greedy = list(self.greedy.values())
        record = {
            "eval_round": self.round,
            "step": self.step,
            "policy_version": self.policy_version,
            "sampled_versions": sorted({m.policy_version for m in [*greedy, *self.sampled.values()]}),
            "examples": len(self.example_ids),
            "pass@1": _mean([m.correct[0] for m in greedy]),  # greedy accuracy
            "reward_mean": _mean([m.scores[0] for m in greedy]),
            "response_length_mean": _mean([m.lengths[0] for m in greedy]),
            "response_clip_ratio": _mean([m.clipped for m in greedy]),
        }
        if self.samples:
            k, sampled = self.samples, list(self.sampled.values())
            correct = [int(round(sum(m.correct))) for m in sampled]
            record[f"mean@{k}"] = _mean([c / k for c in correct])
            for j in ks_for(k):
                if j > 1:  # pass@1 of the samples is mean@k
                    record[f"pass@{j}"] = _mean([pass_at_k(k, c, j) for c in correct])
            record["sampled_reward_mean"] = _mean([s for m in sampled for s in m.scores])
            record["sampled_length_mean"] = _mean([n for m in sampled for n in m.lengths])
        everything = [*greedy, *self.sampled.values()]
        record["verifier_failures"] = sum(m.failures for m in everything)
        record["verifier_timeouts"] = sum(m.timeouts for m in everything)
        record["score_s"] = sum(m.score_s for m in everything)
        record["generate_s"] = self.generate_s
        tokens = sum(n for m in everything for n in m.lengths)
        record["generated_tokens"] = tokens
        record["gen_tokens_per_s"] = tokens / self.generate_s if self.generate_s > 0 else None  # generator seconds
        record["eval_s"] = time.perf_counter() - self.started
        return record


def _mean(xs) -> float | None:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else None
