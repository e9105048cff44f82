"""roles/checkpoint/resume.py: a run or checkpoint folder names its newest checkpoint, and a
damaged small file is named when it is read."""

from __future__ import annotations

import pytest

from launch.resume import find_resume
from roles.checkpoint.layout import CheckpointIOError
from roles.checkpoint.resume import Resume, read_saved_config, resolve_checkpoint_path
from roles.checkpoint.rng import load_rng, rng_file
from support.checkpoints import plan_at, run_config, write_checkpoint


def test_a_run_folder_or_its_checkpoint_folder_names_its_newest(base_config, tmp_path):
    cfg = run_config(base_config, tmp_path)
    plan = cfg.checkpoints()
    write_checkpoint(plan, 2)
    newest = write_checkpoint(plan, 4)
    run = tmp_path / "run"
    assert resolve_checkpoint_path(run) == resolve_checkpoint_path(run / "checkpoints") == newest
    assert resolve_checkpoint_path(newest) == newest
    assert resolve_checkpoint_path(tmp_path) == tmp_path  # neither: itself, refused by its caller
    assert find_resume(run_config(base_config, tmp_path, **{"run.resume": str(run)})).steps_done == 4


def test_a_damaged_checkpoints_files_are_named_when_read_directly(tmp_path):
    plan = plan_at(tmp_path)
    path = write_checkpoint(plan, 3)
    (path / "controller.json").write_text("{")
    with pytest.raises(CheckpointIOError, match=r"controller\.json: damaged"):
        Resume(str(path), 3).controller_state()
    rng_file(path, 0).write_bytes(b"nonsense")
    with pytest.raises(CheckpointIOError, match=r"rank-00000\.pkl: damaged"):
        load_rng(path, 0)
    (path / "config.yaml").unlink()
    with pytest.raises(CheckpointIOError, match=r"config\.yaml: cannot be read \(No such file"):
        read_saved_config(path)
