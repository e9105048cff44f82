"""roles/controller.py: several checkpoints in flight at once (checkpoint every step, trainers
running ahead at max_staleness >= 2), each finalized once every rank has saved its part."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from roles.controller import ControllerActor
from roles.protocol import StateSaved
from runtime.mailbox import Address, Envelope


def _controller(finalized: list, asked: list):
    c = object.__new__(ControllerActor)  # only the checkpoint bookkeeping is exercised
    c._positions = {1: {"at": 1}, 2: {"at": 2}}
    c.next_eval_group = 0
    c._saving = {}
    c._finish_after_save = False
    c.routes = SimpleNamespace(colocated=False, generate_role="generator", generators=2, rewards=1, critics=0)
    c.mailbox = SimpleNamespace(send_role=lambda role, msg: asked.append((role, msg.steps_done)))
    c.checkpoints = SimpleNamespace(
        write_controller_part=lambda steps, state: f"part-{steps}", finalize=lambda steps: finalized.append(steps)
    )
    c.log = SimpleNamespace(write=lambda line: None)
    return c


def _saved(c, role, index, steps):
    c.on_state_saved(Envelope(Address(role, index), StateSaved(steps_done=steps)))


def test_a_second_checkpoint_begun_before_the_first_completes():
    finalized, asked = [], []
    c = _controller(finalized, asked)
    c._begin_checkpoint(1)
    _saved(c, "generator", 0, 1)
    c._begin_checkpoint(2)  # the trainers ran ahead: checkpoint 2 before 1 is complete
    _saved(c, "generator", 0, 2)
    _saved(c, "generator", 1, 1)
    _saved(c, "reward", 0, 1)
    assert finalized == [1]
    _saved(c, "generator", 1, 2)
    _saved(c, "reward", 0, 2)
    assert finalized == [1, 2] and c._saving == {}
    assert sorted(asked) == [("generator", 1), ("generator", 2), ("reward", 1), ("reward", 2)]


def test_a_reply_for_a_checkpoint_not_being_written_is_still_an_error():
    c = _controller([], [])
    c._begin_checkpoint(1)
    with pytest.raises(RuntimeError, match="saved checkpoint 5, which is not being written"):
        _saved(c, "generator", 0, 5)


def test_critic_ranks_are_asked_too_and_the_checkpoint_waits_for_them():
    finalized, asked = [], []
    c = _controller(finalized, asked)
    c.routes.critics = 2
    c._begin_checkpoint(1)
    for role, index in [("generator", 0), ("generator", 1), ("reward", 0), ("critic", 0)]:
        _saved(c, role, index, 1)
    assert finalized == []  # the second critic rank has not saved its shards yet
    _saved(c, "critic", 1, 1)
    assert finalized == [1] and ("critic", 1) in asked
