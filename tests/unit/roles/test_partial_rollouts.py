"""roles/partial_rollouts.py: steps given to groups as they end, the staleness rule, the carry list."""

from __future__ import annotations

from roles.partial_rollouts import SlotBook
from roles.protocol import Schedule


def _book(steps=4, P=2, oversample=0.5, k=1, start=0, carry=()):
    return SlotBook(P, steps, oversample, Schedule(steps, k), start_step=start, carry=carry)


def test_the_open_slots_and_the_oversampled_groups_are_wanted():
    book = _book(P=4, oversample=0.5)
    assert book.wanted(open_steps=2) == 8 + 2
    tickets = [book.hand_out(e) for e in range(10)]
    assert book.wanted(2) == 0 and tickets == list(range(10))
    assert book.wanted(10) == 2 * 4  # steps past the run's end open no slot


def test_a_step_takes_the_first_groups_to_end_and_the_slow_one_carries_over():
    book = _book(P=2, k=2)
    for e in (10, 11, 12):
        book.hand_out(e)
    assert book.assign(2, oldest_version=0, tokens=5) == (0, 0)  # the last sent ends first
    assert book.assign(1, oldest_version=0, tokens=5) == (0, 1)
    assert book.assign(0, oldest_version=0, tokens=9) == (1, 2)  # step 0 is full: it carries over
    assert book.stats[1]["carried_groups"] == 1 and not book.stats[0]
    assert book.by_step == {0: [12, 11], 1: [10]}


def test_a_group_too_stale_for_the_next_free_slot_is_dropped_and_its_example_goes_again():
    book = _book(P=1, k=1)
    book.hand_out(7)
    book.hand_out(8)
    assert book.assign(0, oldest_version=0, tokens=3) == (0, 0)
    assert book.assign(1, oldest_version=-1, tokens=4) is None  # step 1 needs version 0 or newer
    assert list(book.carry) == [8]
    assert book.stats[1] == {"dropped_groups": 1, "discarded_tokens": 4}
    book.hand_out(book.carry.popleft())
    assert book.assign(2, oldest_version=0, tokens=4) == (1, 1)


def test_groups_ending_after_the_last_slot_are_dropped_without_going_again():
    book = _book(steps=1, P=1)
    book.hand_out(1)
    book.hand_out(2)
    assert book.assign(0, 0, 1) == (0, 0)
    assert book.assign(1, 0, 1) is None and not book.carry


def test_the_carry_list_holds_every_example_taken_but_not_trained_before_the_checkpoint():
    book = _book(P=2, k=3)
    for e in (1, 2, 3, 4, 5):
        book.hand_out(e)
    for ticket in (0, 1, 2):
        book.assign(ticket, 0, 1)  # steps 0 (1, 2) and 1 (3)
    book.carry.append(9)
    assert book.carry_list(steps_done=1) == [3, 4, 5, 9]
    book.forget_before(1)
    assert book.by_step == {1: [3]}
    resumed = _book(P=2, k=3, start=1, carry=book.carry_list(1))
    assert resumed.assigned == 2 and list(resumed.carry) == [3, 4, 5, 9]
