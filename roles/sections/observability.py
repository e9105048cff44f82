"""The ``logging:`` section: where the controller sends what it logs, besides ``metrics.jsonl``.

``metrics.jsonl`` is always written and stays the source of truth: every backend named here
receives the same numbers, under the grouped names of ``roles.observe.metric_names``. Only the
controller writes (it already receives every metric); no other rank imports a logging library.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from roles.sections.base import Section

WANDB_MODES = ("online", "offline", "disabled")


class WandbConfig(Section):
    """``logging.wandb``: a Weights & Biases run (``wandb.init``)."""

    project: str = Field(min_length=1)
    name: str | None = None  # the run's name in W&B (default: the name of run.out's folder)
    entity: str | None = None  # team or user (default: the logged-in user's)
    # offline (the default): compute nodes rarely reach the internet; the run is written under
    # <run.out>/wandb and uploaded later with `wandb sync <run.out>/wandb/offline-run-*`.
    # online needs the network and a login (WANDB_API_KEY); disabled: a no-op run.
    mode: Literal["online", "offline", "disabled"] = "offline"


class LoggingConfig(Section):
    """The role map's ``logging:`` section."""

    tensorboard: bool = False  # event files under <run.out>/tensorboard (`tensorboard --logdir`)
    wandb: WandbConfig | None = None  # a W&B run, if set
    # Generations per step (prompt, response, reward and its components, policy version,
    # finish reason) appended to <run.out>/samples.jsonl, and shown in TensorBoard as text
    # and in W&B as a table. Spread over the step's prompts: one sample of each of the first
    # N prompts, then a second sample of each, and so on.
    samples_per_step: int = Field(0, ge=0, le=1024)
    # When stdout is not a terminal (a Slurm log): one plain progress line this often,
    # instead of a redrawn bar.
    progress_every_s: float = Field(30.0, gt=0, le=86400)

    def backends(self) -> list[str]:
        """The backends this section turns on, by name."""
        return (["tensorboard"] if self.tensorboard else []) + (["wandb"] if self.wandb is not None else [])
