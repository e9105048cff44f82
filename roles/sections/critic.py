"""The ``critic:`` section: the value model on the critic ranks (``world.critic``), its own
weights, precision and optimisation, for ``algorithm.advantage: gae`` (``roles.critic``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from roles.sections.base import Section


class CriticConfig(Section):
    # The value model's starting weights: a Hugging Face folder of the policy's architecture
    # (a value model saved by mpirl export, or a causal LM whose head is replaced by a fresh
    # scalar one), or a Hub name (owner/name[@revision]) in the local cache. None: model.path.
    path: str | None = None
    dtype: Literal["float32", "bfloat16", "float16"] | None = None  # None: model.dtype
    lr: float = Field(1.0e-5, gt=0)  # AdamW learning rate of the value model
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, ge=0)  # max gradient norm; 0 disables clipping
    micro_batch: int = Field(64, gt=0, le=1 << 16)  # sequences per forward/backward pass
    # The value loss's clip: a value may move at most this far from the one the advantages
    # were computed with (PPO's clipped value loss); 0: unclipped.
    value_clip: float = Field(0.2, ge=0)
    updates_per_step: int = Field(1, gt=0, le=64)  # critic updates on each step's data
    # Steps at the start on which only the critic learns: the policy's update is not applied
    # (its weights stay those of model.path) while the values settle (slime's critic-only steps).
    warmup_steps: int = Field(0, ge=0)

    @field_validator("path")
    @classmethod
    def _hub_name(cls, v: str | None) -> str | None:
        from roles.hub_cache import model_folder

        return None if v is None else model_folder(v)  # the folder checks are the role map's
