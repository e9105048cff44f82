"""The interface of a learned reward, and the options every one of them has.

A learned reward scores a batch of :class:`ScoreItem` at once and gives one raw value per
item, or ``None`` when that item could not be scored (the model raised on it, the judge's
answer did not parse, the server gave up): such an item scores 0 and is counted. The raw
values are then shaped the same way for every scorer (``roles.rewards.learned.shaping``):
normalised (none, per group, running mean/std), scaled, offset and clipped.

To add one: subclass :class:`LearnedReward` with a nested ``Config`` (a subclass of
:class:`LearnedConfig`) and ``score_raw``; register it in ``roles.rewards.learned.LEARNED`` or
name it ``package.module:Class`` in the role map.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field

from roles.rewards.base import RewardConfig


@dataclass(frozen=True)
class ScoreItem:
    messages: list[dict]  # the prompt as chat messages (the task's system prompt included)
    prompt: str  # the prompt as the policy saw it (its chat template applied), decoded
    response: str  # the response, decoded with the policy's tokenizer
    example: Any  # the task's Example: its reference answer and metadata


@dataclass
class RawScore:
    value: float | None  # None: not scored (it scores 0, counted as a failure)
    note: str = ""  # what the scorer said besides the number (a judge's verdict), for samples.jsonl
    # Per-item figures logged as "<label>/<key>" (their mean over a step's samples is its
    # share): {"truncated": 1.0}, {"parse_failed": 1.0}.
    extras: dict[str, float] = field(default_factory=dict)


@dataclass
class ScorerContext:
    """What a reward rank gives a learned reward when it builds it."""

    task_config: Any = None  # the task's Config: its chat template settings and system prompt
    rank_index: int = 0  # this rank among the reward ranks
    gpu_slot: int = 0  # the GPU this rank takes on its node, when it has GPUs (after the model ranks')
    ranks: int = 1  # reward ranks in the job
    group: Any = None  # the reward ranks' torch process group (a sharded model), else None
    seed: int = 0  # the run's seed (a judge that samples)
    extra: dict = field(default_factory=dict)


class LearnedConfig(RewardConfig):
    """Options every learned reward has: what is done to its raw scores."""

    # none: the raw score; group: minus the mean of its group (the n samples of one prompt),
    # over their standard deviation; running: minus the running mean over the running
    # standard deviation of every score this rank has given (kept in checkpoints).
    normalize: Literal["none", "group", "running"] = "none"
    scale: float = 1.0  # then multiplied by this
    offset: float = 0.0  # then this is added
    clip: float | None = Field(None, gt=0)  # then clipped to [-clip, clip]; None: not clipped


class ScorerGaveUp(RuntimeError):
    """Raised by ``score_raw`` when the scorer cannot go on (its server has not answered for
    too long): it ends the job with this message, where any other exception fails one batch."""


class LearnedReward:
    """Base of scorers that run in the reward rank over a batch of items."""

    Config: ClassVar[type[LearnedConfig]] = LearnedConfig
    # True when every score_raw call is collective over the reward ranks (a sharded model):
    # the rank then calls it in lockstep with the others, with no items when it has none.
    collective: bool = False

    def __init__(self, config: LearnedConfig, context: ScorerContext):
        self.config = config
        self.context = context

    def score_raw(self, items: Sequence[ScoreItem]) -> list[RawScore]:
        """One raw score per item, in order. Raising fails the whole batch (each item 0), except
        :class:`ScorerGaveUp`, which ends the job."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the model or connections; the rank is ending."""
