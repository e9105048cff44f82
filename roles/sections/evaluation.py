"""The ``eval:`` section: when and how ``roles.evaluation`` evaluates the policy during training."""

from __future__ import annotations

from pydantic import Field

from roles.sections.base import Section


class EvalConfig(Section):
    """The role map's ``eval:`` section: when and how the policy is evaluated during training."""

    # Evaluate the newest policy on the task's eval split every this many steps (0: never
    # during training). Eval prompts go through the same generators and reward ranks, tagged
    # so no trainer sees them; a run with eval also evaluates its final policy.
    every_steps: int = Field(0, ge=0)
    before_training: bool = False  # also evaluate the starting policy (version 0)
    examples: int | None = Field(None, gt=0)  # the first N eval examples (None: all of them)
    # Greedy decoding always gives pass@1; samples: k also draws k responses per example at
    # `temperature` for mean@k and pass@k (unbiased estimator).
    samples: int = Field(0, ge=0, le=1 << 10)
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int | None = Field(None, gt=0, le=1 << 20)  # None: rollout.max_new_tokens

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0 or self.before_training
