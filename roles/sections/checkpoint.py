"""The ``checkpoint:`` section: how often the run's resumable state is written, and where."""

from __future__ import annotations

from pydantic import Field

from roles.sections.base import Section


class CheckpointConfig(Section):
    """The role map's ``checkpoint:`` section (``roles.checkpoint`` writes and reads them)."""

    # Write a checkpoint after every this many trainer steps (0: never). Each holds what a
    # resumed run needs: policy and optimizer shards, data position, counters, RNG states.
    every_steps: int = Field(0, ge=0)
    keep_last: int = Field(2, gt=0)  # complete checkpoints kept; older ones go once a newer is complete
    dir: str | None = None  # None: <run.out>/checkpoints
