"""A checkpoint folder's names, and how one is made visible atomically and pruned.

A checkpoint is written into ``.step-00000050.partial/`` and renamed only once every part is
in and synced, so a crash mid-save leaves the previous checkpoint as it was; older ones beyond
``keep_last`` are removed after that.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

COMPLETE = "COMPLETE"  # written last: a folder without it is not a checkpoint
LATEST = "latest"  # the name of the newest complete checkpoint (replaced atomically)
CONTROLLER_STATE = "controller.json"
SAVED_CONFIG = "config.yaml"  # the role map the run was started with
TRAINER_SHARDS = "trainer"  # torch.distributed.checkpoint's folder of the trainers' shards
REMOVING = ".removing"  # the suffix of a checkpoint being removed (remove_partials finishes it)


class CheckpointIOError(RuntimeError):
    """A checkpoint cannot be written or read: a trainer-state save or load that failed (the
    message names each failing rank's own error), or a damaged small file of a checkpoint
    (``controller.json``, ``config.yaml``, ``rng/*.pkl``: the message names the file and what is
    wrong with it)."""


def step_name(steps_done: int) -> str:
    return f"step-{steps_done:08d}"


def partial_dir(root: str | Path, steps_done: int) -> Path:
    """Where the checkpoint after ``steps_done`` steps is written before it becomes visible."""
    return Path(root) / f".{step_name(steps_done)}.partial"


def is_complete(path: str | Path) -> bool:
    return (Path(path) / COMPLETE).is_file()


def complete_checkpoints(root: str | Path) -> list[Path]:
    """The complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and is_complete(p)]
    return sorted(found, key=lambda p: p.name)


# ------------------------------------------------------------------------------ writing


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _json_value(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"cannot write {type(value).__name__} into a checkpoint's JSON")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON and sync it (the checkpoint is only as durable as its parts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, default=_json_value)
        f.flush()
        os.fsync(f.fileno())


def finalize(root: str | Path, steps_done: int, keep_last: int) -> Path:
    """Make the partial checkpoint after ``steps_done`` steps visible, then prune old ones.

    The order is what makes it atomic: COMPLETE inside the partial folder, the folder renamed,
    ``latest`` replaced; a crash at any point leaves either the old or the new one complete.
    """
    root = Path(root)
    partial, final = partial_dir(root, steps_done), root / step_name(steps_done)
    (partial / COMPLETE).write_text(f"{steps_done}\n")
    _fsync_dir(partial)
    if final.exists():  # a checkpoint of the same step from an earlier attempt
        _remove(final)
    os.rename(partial, final)
    tmp = root / f".{LATEST}.tmp"
    tmp.write_text(final.name + "\n")
    os.replace(tmp, root / LATEST)
    _fsync_dir(root)
    for old in complete_checkpoints(root)[:-keep_last]:
        _remove(old)
    return final


def _remove(path: Path) -> None:
    """Remove a complete checkpoint: renamed out of sight first (atomic), then deleted. A crash
    in the middle of ``rmtree`` would otherwise leave a folder whose COMPLETE is still there
    while its shards are gone: one resume would pick and fail to load."""
    doomed = path.with_name(f".{path.name}{REMOVING}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def remove_partials(root: str | Path) -> None:
    """Remove the partial checkpoints a stopped run left behind, and the ones it was removing
    (never a complete one)."""
    root = Path(root)
    if root.is_dir():
        for p in [*root.glob(".step-*.partial"), *root.glob(f".step-*{REMOVING}")]:
            shutil.rmtree(p, ignore_errors=True)
