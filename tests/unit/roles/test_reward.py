"""The reward rank without MPI: the groups that arrived together are scored in one scorer call,
and each still goes on with its own rewards, in the order it came."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from roles.protocol import CONTROLLER, EVAL_GREEDY, TRAIN, EvalScored, Rollout, Routes, Scored
from roles.reward import RewardActor
from roles.rewards.overlong import overlong_penalty
from roles.rewards.sandbox import SampleResult
from roles.stream_protocol import GroupReady, SlotAssigned
from roles.tasks.base import Example, TaskConfig
from runtime import Envelope
from runtime.mailbox import Address


class _Table:
    rank, role, index = 2, "reward", 0

    def size(self, role):
        return 1


class _Mailbox:
    def __init__(self):
        self.role_table = _Table()
        self.address = Address("reward", 0)
        self.inbox: collections.deque = collections.deque()
        self.sent: list[tuple] = []

    def poll(self):
        return self.inbox.popleft() if self.inbox else None

    def send(self, dest, msg):
        self.sent.append((dest, msg))

    def progress(self):
        pass


class _Tokenizer:
    """Token ids as text: [3, 4] -> "3 4"."""

    def batch_decode(self, ids, skip_special_tokens=True):
        return [" ".join(map(str, row)) for row in ids]

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


class _Task:
    config = TaskConfig(name="fake", chat_template=False)

    def example(self, example_id):
        return Example(id=example_id, prompt=f"question {example_id}", answer=str(example_id))


class _Scorer:
    """Scores a response by its first token, records every call as (response, example)
    pairs, and when it was closed."""

    collective_group = None  # not a model sharded over reward ranks

    def __init__(self, log: list):
        self.calls: list[list] = []
        self.log = log

    def score(self, groups):
        for g in groups:  # what a learned reward reads besides the response
            assert g.messages == [{"role": "user", "content": g.example.prompt}] and g.prompt == "1 2"
        self.calls.append([(text, g.example) for g in groups for text in g.responses])
        return [
            [SampleResult(float(text.split()[0]), {"correct": float(text == g.example.answer)}) for text in g.responses]
            for g in groups
        ]

    def state_dict(self):
        return {}

    def close(self):
        self.log.append("closed")


def _rollout(group_id: int, first_tokens: list[int], purpose: str = TRAIN) -> Rollout:
    return Rollout(
        example_id=group_id + 10,
        group_id=group_id,
        step=group_id // 4,
        prompt_ids=np.array([1, 2], np.int32),
        response_ids=[np.array([t, 0], np.int32) for t in first_tokens],
        logprobs=[np.zeros(2, np.float32) for _ in first_tokens],
        finish_reasons=["stop"] * len(first_tokens),
        policy_version=0,
        purpose=purpose,
    )


def _actor(overlong=None):
    log: list = []
    mb = _Mailbox()
    scorer = _Scorer(log)
    routes = Routes("generator", "trainer", generators=1, rewards=1, trainers=2)
    actor = RewardActor(mb, routes, _Tokenizer(), _Task(), scorer, prompts_per_step=4, overlong=overlong)
    return actor, mb, scorer, log


def _arrive(mb: _Mailbox, *rollouts: Rollout) -> None:
    mb.inbox.extend(Envelope(Address("generator", 0), r) for r in rollouts)


def test_groups_that_arrived_together_are_scored_in_one_call_and_go_on_in_order():
    actor, mb, scorer, _ = _actor()
    assert actor.step() is False  # nothing came: nothing to do
    groups = [_rollout(0, [5, 6]), _rollout(1, [7, 8, 9]), _rollout(2, [1], purpose=EVAL_GREEDY), _rollout(3, [2, 3])]
    _arrive(mb, *groups)
    assert actor.handle_pending() == 4 and scorer.calls == []  # handlers only queue
    assert actor.step() is True
    assert len(scorer.calls) == 1
    assert [text for text, _ in scorer.calls[0]] == ["5 0", "6 0", "7 0", "8 0", "9 0", "1 0", "2 0", "3 0"]
    assert [ex.answer for _, ex in scorer.calls[0]] == ["10", "10", "11", "11", "11", "12", "13", "13"]

    forwarded = [(dest, m) for dest, m in mb.sent if isinstance(m, Rollout)]
    assert [(dest, m.group_id) for dest, m in forwarded] == [
        (Address("trainer", 0), 0),
        (Address("trainer", 1), 1),
        (Address("trainer", 1), 3),
    ]
    assert [m.rewards for _, m in forwarded] == [[5.0, 6.0], [7.0, 8.0, 9.0], [2.0, 3.0]]
    (eval_dest, eval_msg), *others = [(d, m) for d, m in mb.sent if isinstance(m, EvalScored)]
    assert eval_dest == CONTROLLER and eval_msg.example_id == 12 and eval_msg.scores == [1.0] and not others
    notices = [m for d, m in mb.sent if isinstance(m, Scored)]
    assert [n.reward_sum for n in notices] == [11.0, 24.0, 5.0] and all(n.samples > 0 for n in notices)
    # Each group carries its samples' share of the one call: 2, 3 and 2 of 8 samples.
    shares = [m.timings["score_s"] for _, m in forwarded]
    assert all(s > 0 for s in shares) and shares[0] == pytest.approx(shares[2]) and shares[1] > shares[0]
    assert [n.score_s for n in notices] == shares
    assert eval_msg.score_s == pytest.approx(shares[0] / 2)


def test_groups_that_came_before_the_stop_are_scored_and_sent_before_the_scorer_closes():
    actor, mb, scorer, log = _actor()
    _arrive(mb, _rollout(0, [4]), _rollout(1, [5]))
    actor.handle_pending()
    mb.sent.clear()
    log.append("stopping")
    actor.stop("done")
    assert [m.rewards for _, m in mb.sent if isinstance(m, Rollout)] == [[4.0], [5.0]]
    assert len(scorer.calls) == 1 and log == ["stopping", "closed"]
    assert actor.step() is False  # nothing left over


def test_a_late_group_of_an_older_step_is_scored_and_sent_before_a_newer_steps_groups():
    actor, mb, scorer, _ = _actor()
    _arrive(mb, _rollout(4, [7]), _rollout(3, [1]), _rollout(5, [8]))  # steps 1, 0, 1
    actor.handle_pending()
    actor.step()
    assert [[text for text, _ in call] for call in scorer.calls] == [["1 0"], ["7 0", "8 0"]]
    assert [m.group_id for _, m in mb.sent if isinstance(m, Rollout)] == [3, 4, 5]


def _ticketed(ticket: int, first_tokens: list[int]) -> Rollout:
    """A dynamic-sampling group: handed out without a step, its group id its ticket."""
    r = _rollout(ticket, first_tokens)
    r.step = -1
    return r


def test_dynamic_sampling_a_scored_group_waits_for_its_slot_and_a_dropped_one_goes_nowhere():
    actor, mb, _, _ = _actor()
    _arrive(mb, _ticketed(7, [3, 3]), _ticketed(8, [1, 2]))
    actor.handle_pending()
    actor.step()
    asked = [m for d, m in mb.sent if isinstance(m, GroupReady) and d == CONTROLLER]
    assert [(m.ticket, m.all_equal, m.reward_sum, m.tokens) for m in asked] == [(7, True, 6.0, 4), (8, False, 3.0, 4)]
    assert not [m for _, m in mb.sent if isinstance(m, (Rollout, Scored))]  # nothing goes on before its answer
    mb.sent.clear()
    mb.inbox.extend([Envelope(CONTROLLER, SlotAssigned(7, -1, -1)), Envelope(CONTROLLER, SlotAssigned(8, 2, 9))])
    actor.handle_pending()
    ((dest, forwarded),) = [(d, m) for d, m in mb.sent if isinstance(m, Rollout)]
    assert dest == Address("trainer", 1) and (forwarded.step, forwarded.group_id) == (2, 9)
    notice = [m for _, m in mb.sent if isinstance(m, Scored)]
    assert len(notice) == 1 and notice[0].step == 2 and notice[0].reward_sum == 3.0


@pytest.mark.parametrize(
    "length, want", [(4, 0.0), (6, 0.0), (7, -0.25), (9, -0.75), (10, -1.0), (12, -1.0)]
)  # fmt: skip
def test_the_over_length_penalty_ramps_over_the_buffer(length, want):
    assert overlong_penalty(length, max_length=10, buffer=4) == pytest.approx(want)


def test_the_over_length_penalty_is_added_to_training_scores_only():
    actor, mb, _, _ = _actor(overlong=(2, 1, 0.5))  # responses of 2 tokens: at max_length, penalty -1 x 0.5
    _arrive(mb, _rollout(0, [5, 6]), _rollout(1, [4], purpose=EVAL_GREEDY))
    actor.handle_pending()
    actor.step()
    (trained,) = [m for _, m in mb.sent if isinstance(m, Rollout)]
    assert trained.rewards == [4.5, 5.5]
    (notice,) = [m for _, m in mb.sent if isinstance(m, Scored)]
    assert notice.components["overlong"] == pytest.approx(-1.0) and notice.reward_sum == pytest.approx(10.0)
    (evaluated,) = [m for _, m in mb.sent if isinstance(m, EvalScored)]
    assert evaluated.scores == [4.0]
