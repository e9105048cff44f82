"""Finding the checkpoint a run continues from, and reading its small files, checked.

A checkpoint's small files are read on rank 0 before any rank starts (launch/resume.py calls
check_readable): a damaged one is a CheckpointIOError naming the file, not a traceback from
deep inside a rank that has already begun.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from roles.checkpoint.layout import (
    CONTROLLER_STATE,
    LATEST,
    SAVED_CONFIG,
    TRAINER_SHARDS,
    CheckpointIOError,
    complete_checkpoints,
    is_complete,
    step_name,
)
from roles.checkpoint.rng import read_rng
from roles.checkpoint.trainer_state import shard_index
from roles.run_files import CHECKPOINTS


def newest(root: str | Path) -> Path | None:
    done = complete_checkpoints(root)
    return done[-1] if done else None


def resolve_checkpoint_path(path: str | Path) -> Path:
    """``path`` itself, or for a checkpoint folder (one with ``latest``) its newest checkpoint,
    or for a run folder (``run.out``, whose ``checkpoints/`` has one) the newest of its own."""
    path = Path(path)
    if path.is_dir() and not (path / LATEST).is_file() and (path / CHECKPOINTS / LATEST).is_file():
        path = path / CHECKPOINTS
    if path.is_dir() and (path / LATEST).is_file():
        named = path / (path / LATEST).read_text().strip()
        # A crash between removing a checkpoint and replacing ``latest`` leaves it naming one
        # that is gone: the newest complete one is what it would have named.
        return named if is_complete(named) else (newest(path) or named)
    return path


def _read_text(f: Path) -> str:
    try:
        return f.read_text()
    except OSError as e:
        raise CheckpointIOError(f"{f}: cannot be read ({e.strerror or e})") from e
    except UnicodeDecodeError as e:
        raise CheckpointIOError(f"{f}: damaged (not text: {e.reason} at byte {e.start})") from e


def read_controller_state(path: str | Path) -> dict:
    """``controller.json`` of checkpoint ``path``, checked: a JSON object with a whole
    ``steps_done`` (the step its folder is named after), a ``position`` and ``next_eval_group``."""
    f = Path(path) / CONTROLLER_STATE
    try:
        state = json.loads(_read_text(f))
    except ValueError as e:
        raise CheckpointIOError(f"{f}: damaged (not valid JSON: {e})") from e
    if not isinstance(state, dict):
        raise CheckpointIOError(f"{f}: damaged (a JSON {type(state).__name__}, not an object)")
    steps = state.get("steps_done")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise CheckpointIOError(f"{f}: damaged (steps_done is {steps!r}, not a count of steps)")
    if Path(path).name.startswith("step-") and Path(path).name != step_name(steps):
        raise CheckpointIOError(f"{f}: damaged (steps_done is {steps}, but the folder is {Path(path).name})")
    for key in ("position", "next_eval_group"):
        if key not in state:
            raise CheckpointIOError(f"{f}: damaged (no {key!r} in it)")
    if not isinstance(state["position"], dict):
        raise CheckpointIOError(f"{f}: damaged (position is not an object)")
    return state


def read_saved_config(path: str | Path) -> dict:
    """The role map checkpoint ``path`` was written with (its ``config.yaml``), as a dict."""
    import yaml

    f = Path(path) / SAVED_CONFIG
    try:
        saved = yaml.safe_load(_read_text(f))
    except yaml.YAMLError as e:
        raise CheckpointIOError(f"{f}: damaged (not valid YAML: {' '.join(str(e).split())})") from e
    if not isinstance(saved, dict):
        raise CheckpointIOError(f"{f}: damaged (not a role map but a {type(saved).__name__})")
    return saved


def check_readable(path: str | Path) -> None:
    """CheckpointIOError naming the first damaged small file of checkpoint ``path``: its
    ``controller.json``, ``config.yaml`` and every rank's ``rng/rank-*.pkl``, and the trainers'
    shard index (``trainer/.metadata``) missing. The shards are read, and a damaged one named,
    by the trainers themselves (load_trainer_state); the index is only looked for here, since
    reading it takes torch, which the controller's rank, where this runs, does without."""
    read_controller_state(path)
    read_saved_config(path)
    for f in sorted((Path(path) / "rng").glob("rank-*.pkl")):
        read_rng(f)
    shard_index(Path(path) / TRAINER_SHARDS)


def steps_done(path: str | Path) -> int:
    return read_controller_state(path)["steps_done"]


@dataclass(frozen=True)
class Resume:
    """Where a resumed run continues from: the checkpoint, and how many steps it holds."""

    path: str
    steps_done: int

    def controller_state(self) -> dict:
        return read_controller_state(self.path)
