"""roles/checkpoint/layout.py: checkpoint files, pruning that never leaves a gutted complete
checkpoint, and the JSON the controller's state travels as."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from roles.checkpoint import layout
from roles.checkpoint.layout import complete_checkpoints, is_complete, remove_partials, write_json
from roles.checkpoint.resume import newest, resolve_checkpoint_path, steps_done
from roles.prompt_stream import PromptStream
from support.checkpoints import plan_at, write_checkpoint


def test_the_data_position_continues_the_same_sequence(tmp_path):
    whole = PromptStream(range(10, 23), seed=4)
    first = whole.take(9)
    write_json(tmp_path / "pos.json", whole.position())
    pos = json.loads((tmp_path / "pos.json").read_text())  # it travels as JSON
    rest = whole.take(30)  # across two epochs
    resumed = PromptStream(range(10, 23), seed=4)
    resumed.restore(pos)
    assert resumed.take(30) == rest
    assert sorted(first + rest[:4]) == list(range(10, 23))  # an epoch is every example once
    with pytest.raises(ValueError, match="training data changed"):
        PromptStream(range(5), seed=4).restore(pos)


def test_old_checkpoints_go_only_after_a_newer_is_complete(tmp_path):
    plan = plan_at(tmp_path, keep=2)
    for s in (2, 4, 6):
        write_checkpoint(plan, s)
    assert [p.name for p in complete_checkpoints(plan.root)] == ["step-00000004", "step-00000006"]
    assert steps_done(newest(plan.root)) == 6


@pytest.mark.parametrize("overwrite", [False, True], ids=["pruned", "same-step-rewritten"])
def test_a_crash_while_removing_a_checkpoint_leaves_no_complete_but_gutted_one(tmp_path, monkeypatch, overwrite):
    """kill -9 in the middle of deleting a checkpoint (keep_last's pruning, or the one of the same
    step a run resumed from an older checkpoint writes again): COMPLETE may outlive the shards
    in a plain rmtree. Removed by rename first, the folder is never a candidate for resume."""
    plan = plan_at(tmp_path, keep=2)
    write_checkpoint(plan, 2)
    write_checkpoint(plan, 4)

    rmtree = shutil.rmtree

    def crash_midway(path, ignore_errors=False):  # the shards go, COMPLETE stays, then the kill
        rmtree(Path(path) / "trainer")
        raise KeyboardInterrupt

    monkeypatch.setattr(layout.shutil, "rmtree", crash_midway)
    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(plan, 4 if overwrite else 6)
    monkeypatch.undo()
    for done in complete_checkpoints(plan.root):
        assert (done / "trainer" / ".metadata").is_file(), f"{done.name} is complete but has no shards"
    assert is_complete(resolve_checkpoint_path(plan.root))  # what export and run.resume: DIR take
    remove_partials(plan.root)  # the next start clears what the crash left
    assert not [p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith(".step-")]
