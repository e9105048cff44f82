"""The ``rollout:`` section: the shape of a step and how its responses are sampled.

Read by the controller (prompts and samples per step), the generators (sampling) and the
trainers (the temperature their log-probs use); the step itself is ``roles.protocol``'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from roles.sections.base import Section

# Bounds far above any real run's, so that a typo (an exponent, a zero too many) is named
# before any work instead of being found by the OOM killer; launch/preflight/sizing.py then checks the
# sizes that pass against the machine's memory.
MAX_PROMPTS_PER_STEP = 1 << 16
MAX_SAMPLES_PER_PROMPT = 1 << 10
MAX_NEW_TOKENS = 1 << 20


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
