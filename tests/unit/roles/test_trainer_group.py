"""roles/trainer_group.py with one trainer: every collective is the identity. (Several trainers:
tests/mpi/test_fsdp_parity.py, whose metrics go through ``reduce_metrics``.)"""

from __future__ import annotations

from roles.trainer_group import TrainerGroup


def test_one_trainer_needs_no_collective():
    one = TrainerGroup(None, 1)
    assert one.agree(True) and not one.agree(False, every=True)
    assert one.most(3) == 3 and one.sum(2.5) == 2.5
    metrics = {"loss": 0.1, "tokens": 4.0}
    assert one.reduce_metrics(metrics) is metrics
