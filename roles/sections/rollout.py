"""The ``rollout:`` section: the shape of a step and how its responses are sampled.

Read by the controller (prompts and samples per step), the generators (sampling) and the
trainers (the temperature their log-probs use); the step itself is ``roles.protocol``'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from roles.sections.base import Section

# Bounds far above any real run's, so that a typo (an exponent, a zero too many) is named
# before any work instead of being found by the OOM killer; launch/preflight/sizing.py then checks the
# sizes that pass against the machine's memory.
MAX_PROMPTS_PER_STEP = 1 << 16
MAX_SAMPLES_PER_PROMPT = 1 << 10
MAX_NEW_TOKENS = 1 << 20


class DynamicSampling(Section):
    """``rollout.dynamic_sampling``: DAPO's dynamic sampling made for asynchrony: groups whose
    samples all score the same are dropped after scoring and their step refilled with new groups,
    spares handed out ahead of need from the measured drop rate (``roles.partial_rollouts``)."""

    enabled: bool = False
    # A step drops at most this many times prompts_per_step all-equal groups; past that it trains
    # them (their advantage is 0) rather than make the trainer wait for more refills.
    max_refill_rounds: int = Field(2, ge=1, le=64)
    # Spares kept in flight beyond the open slots (from the drop rate), at most this many times
    # prompts_per_step: the generation a step may spend ahead of need.
    max_spares: float = Field(2.0, ge=0, le=16)


class RolloutConfig(Section):
    """The ``rollout:`` section: the shape of a step and how its responses are sampled."""

    prompts_per_step: int = Field(16, gt=0, le=MAX_PROMPTS_PER_STEP)  # prompt groups the trainers consume per step
    samples_per_prompt: int = Field(8, gt=0, le=MAX_SAMPLES_PER_PROMPT)  # group size n for the group baseline
    max_new_tokens: int = Field(16, gt=0, le=MAX_NEW_TOKENS)  # response length cap
    temperature: float = Field(1.0, gt=0)  # sampling temperature (the trainer uses the same)
    top_p: float = Field(1.0, gt=0, le=1)  # nucleus mass; < 1 truncates the behaviour policy
    # batch: a generator samples a batch of groups per engine call, every row waiting for the
    # batch's longest sample, and takes new weights between batches. stream: a stream of
    # requests with continuous batching; each group goes on the moment its last sample ends
    # and generators pull groups as room frees (docs/architecture.md, "The life of a request").
    mode: Literal["batch", "stream"] = "batch"
    # stream: load each new policy between decode steps while sequences are in flight (their
    # later tokens record the new version); false: between groups only, when the engine is empty
    inflight_updates: bool = True
    # stream: partial rollouts (APRIL): keep this share of a step's groups more in flight than
    # the open steps need; a step takes the first groups to finish, the rest carry over to the
    # next step (dropped if their oldest token is then too stale). 0: each step's own groups.
    oversample: float = Field(0.0, ge=0, le=4)
    # DAPO's dynamic sampling (``dynamic_sampling: true`` for the defaults); docs/algorithms.md
    dynamic_sampling: DynamicSampling = DynamicSampling()

    @field_validator("dynamic_sampling", mode="before")
    @classmethod
    def _shorthand(cls, value):
        if isinstance(value, bool):
            return {"enabled": value}
        if isinstance(value, dict) and "enabled" not in value:  # its options given: it is wanted
            return {**value, "enabled": True}
        return value
