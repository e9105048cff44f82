"""A run's checkpoints as the controller and the trainers write them: where they go, how many
are kept, and the controller's own part of each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from roles.checkpoint.layout import CONTROLLER_STATE, SAVED_CONFIG, finalize, partial_dir, write_json
from roles.checkpoint.rng import save_rng


@dataclass(frozen=True)
class CheckpointPlan:
    """Where a run's checkpoints go, how many are kept, and the role map each one records."""

    root: str
    keep_last: int
    config_text: str  # the parsed role map as YAML, written into every checkpoint

    def partial(self, steps_done: int) -> Path:
        return partial_dir(self.root, steps_done)

    def write_controller_part(self, steps_done: int, state: dict) -> Path:
        """The controller's files: its state, the role map, its random states (rank 0)."""
        path = self.partial(steps_done)
        write_json(path / CONTROLLER_STATE, {"steps_done": steps_done, **state})
        (path / SAVED_CONFIG).write_text(self.config_text)
        save_rng(path, 0)
        return path

    def finalize(self, steps_done: int) -> Path:
        return finalize(self.root, steps_done, self.keep_last)
