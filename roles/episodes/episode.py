"""One episode's tokens and tallies, as the generator builds it turn by turn.

The response of an episode is every model turn as sampled (loss mask 1, behaviour log-probs
and versions as the engine gave them) with the observation ids between turns (mask 0,
log-prob 0, the version of the turn before: they are never trained, and a version only
counts for staleness where tokens were sampled). ``final_start`` is where the last model turn
begins: the reward ranks score that turn's text. Plain data: knows nothing of engines,
environments or messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roles.engines.base import Sample


@dataclass
class Episode:
    group: int  # the key of its group in the generator
    index: int  # its place in the group (sample j)
    seed: int | None  # its turns' sampling seeds derive from it (roles.episodes.runner.turn_seed)
    budget: int  # tokens after the prompt at most (turns and observations)
    prompt_ids: np.ndarray | None = None  # the opening, once the environment has reset
    state: Any = None  # the environment's, between calls
    ids: list = field(default_factory=list)
    mask: list = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    versions: list = field(default_factory=list)
    turns: int = 0
    final_start: int = 0
    end: str | None = None  # roles.environments.base.END_REASONS once it has ended
    turn_rewards: list = field(default_factory=list)
    env_reward: float | None = None
    counts: dict = field(default_factory=lambda: {"tool_calls": 0.0, "tool_errors": 0.0, "tool_latency_s": 0.0})
    env_errors: int = 0  # calls into the environment that failed (timed out, crashed, raised)
    observation_tokens: int = 0

    @property
    def used(self) -> int:
        """Tokens after the prompt so far."""
        return sum(len(a) for a in self.ids)

    @property
    def left(self) -> int:
        return self.budget - self.used

    def context(self) -> np.ndarray:
        """Prompt and everything since: the next turn's prompt."""
        return np.concatenate([self.prompt_ids, *self.ids]).astype(np.int32)

    def add_turn(self, sample: Sample, version: int) -> None:
        n = len(sample.response_ids)
        self.final_start = self.used
        self.ids.append(np.asarray(sample.response_ids, np.int32))
        self.mask.append(np.ones(n, np.uint8))
        self.logprobs.append(np.asarray(sample.logprobs, np.float32))
        v = sample.versions if sample.versions is not None else np.full(n, version, np.int32)
        self.versions.append(np.asarray(v, np.int32))
        self.turns += 1

    def add_observation(self, ids: np.ndarray) -> None:
        n = len(ids)
        last = int(self.versions[-1][-1]) if self.versions and len(self.versions[-1]) else 0
        self.ids.append(np.asarray(ids, np.int32))
        self.mask.append(np.zeros(n, np.uint8))
        self.logprobs.append(np.zeros(n, np.float32))
        self.versions.append(np.full(n, last, np.int32))
        self.observation_tokens += n

    def lead_with(self, ids: np.ndarray) -> None:
        """Put ``ids`` (the part of its opening its group's prompt does not share) before its
        first turn, as masked tokens."""
        if len(ids):
            self.final_start += len(ids)
            self.ids.insert(0, np.asarray(ids, np.int32))
            self.mask.insert(0, np.zeros(len(ids), np.uint8))
            self.logprobs.insert(0, np.zeros(len(ids), np.float32))
            first = int(self.versions[0][0]) if self.versions and len(self.versions[0]) else 0
            self.versions.insert(0, np.full(len(ids), first, np.int32))
            self.observation_tokens += len(ids)

    def add_info(self, info: dict) -> None:
        for k in self.counts:
            self.counts[k] += float(info.get(k, 0.0))

    def sample(self) -> Sample:
        """The whole episode as one sample of its group."""
        return Sample(
            response_ids=np.concatenate(self.ids).astype(np.int32),
            logprobs=np.concatenate(self.logprobs).astype(np.float32),
            finish_reason="length" if self.end in ("length", "token_budget") else "stop",
            versions=np.concatenate(self.versions).astype(np.int32),
        )

    def loss_mask(self) -> np.ndarray:
        return np.concatenate(self.mask).astype(np.uint8)

    def info(self) -> dict:
        """What travels with the rollout (``Rollout.episodes``)."""
        return {
            "turns": self.turns,
            "end": self.end or "done",
            "final_start": self.final_start,
            "observation_tokens": self.observation_tokens,
            "env_errors": self.env_errors,
            "turn_reward": float(sum(r for r in self.turn_rewards if r is not None)),
            "env_reward": self.env_reward,
            **self.counts,
        }
