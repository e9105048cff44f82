"""roles/dynamic_sampling.py and its use by roles/partial_rollouts.SlotBook: which scored groups a
step drops, the refill bound, the spares sized from the drop rate, the min_version of refills."""

from __future__ import annotations

import pytest

from roles.dynamic_sampling import DropRule, all_equal
from roles.partial_rollouts import SlotBook
from roles.protocol import Schedule
from roles.sections.rollout import DynamicSampling, RolloutConfig


def _rule(P=4, rounds=2, spares=2.0):
    return DropRule(DynamicSampling(enabled=True, max_refill_rounds=rounds, max_spares=spares), P)


def _book(steps=4, P=2, k=1, rounds=2, spares=2.0, start=0, carry=()):
    ds = DynamicSampling(enabled=True, max_refill_rounds=rounds, max_spares=spares)
    return SlotBook(P, steps, 0.0, Schedule(steps, k), start_step=start, carry=carry, dynamic=ds)


@pytest.mark.parametrize(
    "rewards, equal", [([1, 1, 1], True), ([0.0, 0.0], True), ([1], True), ([0, 1, 1], False), ([0.5, 0.25], False)]
)
def test_a_group_is_all_equal_when_every_sample_scored_the_same(rewards, equal):
    assert all_equal(rewards) is equal


def test_a_step_drops_all_equal_groups_up_to_its_refill_bound_then_keeps_them():
    rule = _rule(P=2, rounds=2)  # at most 4 drops for a step
    assert [rule.drops(0, True) for _ in range(5)] == [True] * 4 + [False]
    assert rule.bound_reached(0) and not rule.bound_reached(1)
    assert rule.drops(1, True) and not rule.drops(1, False)  # the next step has its own budget
    rule.forget_before(1)
    assert 0 not in rule.dropped_in and rule.dropped_in[1] == 1


def test_spares_follow_the_measured_drop_rate_within_their_cap():
    rule = _rule(P=4, spares=2.0)  # at most 8 spares
    prior = rule.spares(open_slots=4)
    assert 0 < prior <= 2  # a few from the prior alone
    for _ in range(32):
        rule.drops(0, False)
    assert rule.rate() < 0.05 and rule.spares(4) == 1  # hardly anything drops: ceil of a small share
    for _ in range(32):
        rule.drops(1, equal=True)  # only 8 of these drop (the budget); 24 are kept
    assert rule.spares(4) == pytest.approx(4 * rule.rate() / (1 - rule.rate()), abs=1)
    heavy = _rule(P=4, rounds=64, spares=2.0)
    for _ in range(64):
        heavy.drops(0, True)
    assert heavy.rate() > 0.9 and heavy.spares(open_slots=8) == 8  # capped at max_spares x P
    assert _rule(P=4, spares=0.0).spares(8) == 0  # max_spares 0: refills on demand only


def test_the_book_drops_an_all_equal_group_without_handing_its_example_out_again():
    book = _book(P=2, k=1)
    for e in (10, 11, 12):
        book.hand_out(e)
    assert book.assign(0, oldest_version=0, tokens=5, equal=True, reward_sum=4.0) is None
    assert not book.carry and book.assigned == 0  # used up, as in DAPO; the slot stays free
    assert book.stats[0] == {"filtered_groups": 1, "filtered_tokens": 5, "filtered_reward_sum": 4.0}
    assert book.assign(1, 0, 3, equal=False) == (0, 0)
    assert book.assign(2, 0, 3, equal=False) == (0, 1)
    figures = book.figures(0)
    assert figures["filtered_groups"] == 1 and not figures["refill_bound_reached"] and 0 < figures["drop_rate"] < 1
    assert 0 not in book.stats


def test_past_the_refill_bound_an_all_equal_group_fills_the_step():
    book = _book(P=1, rounds=1)
    for e in range(3):
        book.hand_out(e)
    assert book.assign(0, 0, 1, equal=True) is None  # the one drop step 0 may make
    assert book.assign(1, 0, 1, equal=True) == (0, 0)  # kept: trained with advantage 0
    assert book.figures(0)["refill_bound_reached"]


def test_a_stale_group_still_goes_again_and_an_all_equal_stale_one_is_used_up():
    book = _book(P=1, k=0)
    book.hand_out(7)
    book.hand_out(8)
    assert book.assign(0, oldest_version=-1, tokens=3) is None and list(book.carry) == [7]
    assert book.assign(1, oldest_version=-1, tokens=3, equal=True) is None and list(book.carry) == [7]


def test_refills_are_tagged_with_the_first_open_step_so_its_weights_never_wait_on_it():
    """At staleness 0 step 1 needs version 1, which needs step 0 trained: a refill for an
    unfilled step 0 tagged with step 1's min_version would deadlock the run."""
    book = _book(steps=4, P=2, k=0)
    assert book.expected_step(open_steps=2) == 0
    for e in range(6):  # more than step 0's slots: the spares
        book.hand_out(e)
    assert book.expected_step(open_steps=2) == 0  # partial rollouts would say 1 (6 // 2 capped)
    book.assign(0, 0, 1)
    book.assign(1, 0, 1)
    assert book.expected_step(open_steps=2) == 1


def test_the_wanted_groups_include_the_spares():
    book = _book(steps=10, P=4, spares=1.0)
    spares = book.dynamic.spares(8)
    assert spares > 0 and book.wanted(open_steps=2) == 8 + spares


def test_the_role_map_forms_of_dynamic_sampling():
    assert RolloutConfig(dynamic_sampling=True).dynamic_sampling.enabled
    assert not RolloutConfig().dynamic_sampling.enabled
    assert RolloutConfig.model_validate({"dynamic_sampling": {"max_refill_rounds": 3}}).dynamic_sampling.enabled
    off = RolloutConfig.model_validate({"dynamic_sampling": {"enabled": False, "max_spares": 1.0}})
    assert not off.dynamic_sampling.enabled
