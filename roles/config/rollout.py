"""The ``rollout:`` section: the shape of a step and how its responses are sampled.

Read by the controller (prompts and samples per step), the generators (sampling) and the
trainers (the temperature their log-probs use); the step itself is ``roles.protocol``'s.
"""

from __future__ import annotations

from pydantic import Field

from roles.section import Section


class RolloutConfig(Section):
    """The ``rollout:`` section: the shape of a step and how its responses are sampled."""

    prompts_per_step: int = Field(16, gt=0)  # prompt groups the trainers consume per step
    samples_per_prompt: int = Field(8, gt=0)  # group size n for the group baseline
    max_new_tokens: int = Field(16, gt=0)  # response length cap
    temperature: float = Field(1.0, gt=0)  # sampling temperature (the trainer uses the same)
    top_p: float = Field(1.0, gt=0, le=1)  # nucleus mass; < 1 truncates the behaviour policy
