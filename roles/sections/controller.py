"""The ``run:`` section: the loop ``roles.controller.ControllerActor`` drives."""

from __future__ import annotations

from pydantic import Field, field_validator

from roles.sections.base import Section


class ControllerConfig(Section):
    """The role map's ``run:`` section: the loop the controller drives."""

    steps: int = Field(gt=0)  # trainer steps before the controller stops the job
    max_staleness: int = Field(1, ge=0)  # 0 = on-policy; k = generate with weights <= k versions old
    seed: int = 0  # seeds the data order, each batch's sampling and every rank's RNGs
    out: str = "runs/default"  # metrics.jsonl, summary.json, traces go here
    progress: bool = True  # progress bar on the controller's terminal
    timeout_s: float = Field(3600.0, gt=0)  # a step that makes no progress this long aborts the job
    # A rank that sends no heartbeat this long (stopped, frozen, its node lost) aborts the job,
    # named; each rank beats a dozen times per bound (runtime.liveness).
    liveness_timeout_s: float = Field(60.0, ge=1)
    # A rank that beats but whose loop has not moved this long while its process slept (a
    # deadlock, a wait that will never end) aborts the job, named; busy work is not stuck
    # (runtime.liveness). Long: a slow filesystem or a huge batch may keep a loop still a
    # while. 0: not watched.
    stall_timeout_s: float = Field(600.0, ge=0)
    # auto: continue from the newest complete checkpoint in the run's checkpoint folder if there
    # is one, else start afresh; never: always start afresh (the folder's checkpoints are left
    # alone until new ones replace them); or the path of one checkpoint to continue from (or of a
    # checkpoint folder, or of a run folder: its newest).
    resume: str = "auto"

    @field_validator("resume")
    @classmethod
    def _resume(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("auto, never, or the path of a checkpoint folder; got an empty string")
        return v
