"""roles/dispatch.py: batches to generators, round-robin (batch mode) or by credit (streaming)."""

from __future__ import annotations

import numpy as np
import pytest

from roles.dispatch import Dispatch, split
from roles.protocol import PromptBatch, Routes


class _Mailbox:
    def __init__(self):
        self.sent = []

    def send(self, to, msg):
        self.sent.append((to.index, msg))


def _batch(batch_id, groups):
    ids = list(range(batch_id * 100, batch_id * 100 + groups))
    return PromptBatch(
        batch_id=batch_id,
        step=0,
        min_version=0,
        example_ids=ids,
        group_ids=ids,
        prompts=[np.array([i], np.int32) for i in ids],
        samples_per_prompt=2,
        seed=1,
        group_seeds=[i + 5 for i in ids],
    )


def _routes(generators):
    return Routes("generator", "trainer", generators, 1, 1)


def test_batch_mode_sends_round_robin_at_once():
    mb = _Mailbox()
    d = Dispatch(mb, _routes(2), streaming=False)
    for b in range(3):
        d.send(_batch(b, 2))
    assert [(g, m.batch_id) for g, m in mb.sent] == [(0, 0), (1, 1), (0, 2)]


def test_streaming_sends_no_more_than_credit_splitting_batches_in_order():
    mb = _Mailbox()
    d = Dispatch(mb, _routes(2), streaming=True)
    d.send(_batch(0, 5))
    assert mb.sent == [] and d.queued_groups() == 5  # nobody has room yet
    d.on_credit(1, 3)
    d.on_credit(0, 1)
    sent = [(g, m.group_ids, m.group_seeds, [int(p[0]) for p in m.prompts]) for g, m in mb.sent]
    assert sent == [(1, [0, 1, 2], [5, 6, 7], [0, 1, 2]), (0, [3], [8], [3])]
    assert d.queued_groups() == 1 and d.credit == [0, 0]
    d.on_credit(0, 4)
    assert mb.sent[-1][1].group_ids == [4] and d.credit == [3, 0]


def test_each_group_goes_to_the_generator_with_the_most_room():
    mb = _Mailbox()
    d = Dispatch(mb, _routes(3), streaming=True)
    d.on_credit(0, 2)
    d.on_credit(2, 5)
    d.send(_batch(0, 4))
    assert [(g, m.group_ids) for g, m in mb.sent] == [(2, [0, 1, 2]), (0, [3])]
    assert d.credit == [1, 0, 2]


def test_a_step_spreads_over_every_generator_even_when_each_has_room_for_two():
    mb = _Mailbox()
    d = Dispatch(mb, _routes(4), streaming=True)
    for g in range(4):
        d.on_credit(g, 4)  # room for two steps' share each
    d.send(_batch(0, 8))  # one step: two groups a generator, as round-robin would give
    assert sorted((g, len(m.group_ids)) for g, m in mb.sent) == [(0, 2), (1, 2), (2, 2), (3, 2)]


def test_credit_from_a_generator_that_does_not_exist_is_refused():
    d = Dispatch(_Mailbox(), _routes(1), streaming=True)
    with pytest.raises(ValueError, match="generator 3"):
        d.on_credit(3, 1)


def test_split_keeps_everything_but_the_groups():
    a, b = split(_batch(0, 3), 1)
    assert (a.group_ids, b.group_ids, a.batch_id, b.step) == ([0], [1, 2], 0, 0)
