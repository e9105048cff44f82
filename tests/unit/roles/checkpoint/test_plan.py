"""roles/checkpoint/plan.py: a checkpoint the controller writes becomes visible only when complete."""

from __future__ import annotations

from roles.checkpoint.layout import remove_partials
from roles.checkpoint.resume import newest
from support.checkpoints import plan_at, write_checkpoint


def test_a_checkpoint_becomes_visible_only_when_complete(tmp_path):
    plan = plan_at(tmp_path)
    write_checkpoint(plan, 2)
    plan.write_controller_part(4, {"position": {}, "next_eval_group": 0})  # a save that never finished
    assert newest(plan.root).name == "step-00000002"
    assert (tmp_path / "ckpt" / "latest").read_text().strip() == "step-00000002"
    remove_partials(plan.root)
    assert not list((tmp_path / "ckpt").glob(".*.partial"))
    assert newest(plan.root).name == "step-00000002"
