"""roles/observe/step_record.py: a step's line waits for every group's notices; summary.json's means."""

from __future__ import annotations

import collections

import pytest

from roles.observe.step_record import StepNotices, step_record, summary
from roles.protocol import BatchDone, Routes, Scored, StepDone


def _batch(step, groups):
    return BatchDone(
        batch_id=0, step=step, groups=groups, tokens=10, policy_version=0,
        generate_s=0.5, wait_s=0.0, weight_load_s=0.1, weight_syncs=1,
    )  # fmt: skip


def _scored(step, groups, shown=()):
    return Scored(step=step, groups=groups, score_s=0.2, failures=0, timeouts=0, samples=2 * groups, shown=list(shown))


def test_a_step_is_complete_once_both_roles_reported_every_group():
    n = StepNotices()
    n.add_batch(_batch(0, 2))
    n.add_scored(_scored(0, 4, shown=[{"sample": 1, "group_id": 0}, {"sample": 0, "group_id": 3}]))
    assert not n.complete(0, 4)  # the generators reported half the groups so far
    n.add_batch(_batch(0, 2))
    assert n.complete(0, 4) and not n.complete(1, 4)
    gen, scored, components, shown = n.pop(0)
    assert gen["groups"] == 4 and gen["generate_s"] == 1.0 and scored["samples"] == 8
    assert [r["sample"] for r in shown] == [0, 1]  # in the order samples.jsonl shows them
    assert n.pop(0) == ({}, {}, {}, [])


def test_with_dynamic_sampling_a_step_waits_only_for_its_scored_groups():
    n = StepNotices()
    n.add_batch(_batch(-1, 6))  # sampled before any had a step
    n.add_scored(_scored(0, 4))
    assert not n.complete(0, 4) and n.complete(0, 4, generated=False)


def test_the_dynamic_sampling_block_counts_every_scored_group():
    scored = collections.Counter(groups=4, samples=8, reward_sum=4.0)  # as StepNotices sums them
    gen = {"filtered_groups": 4, "filtered_reward_sum": 8.0, "drop_rate": 0.5, "refill_bound_reached": False}
    m = StepDone(step=0, version=1, metrics={"trainer_wait_s": 0.25})
    record = step_record(
        m, gen, scored, {}, routes=Routes.of({"generator": 1, "reward": 1, "trainer": 1}), data_stats={},
        step_s=1.0, controller={"busy": 0.1, "messages": 3, "elapsed_s": 1.0},
    )  # fmt: skip
    ds = record["dynamic_sampling"]
    assert ds["filtered_groups"] == 4 and ds["filtered_share"] == 0.5 and ds["trainer_wait_s"] == 0.25
    assert ds["reward_mean_all"] == pytest.approx((4.0 + 8.0) / 16)  # the dropped groups' 8 samples too
    assert "dynamic_sampling" not in step_record(
        m, {}, scored, {}, routes=Routes.of({"generator": 1, "reward": 1, "trainer": 1}), data_stats={},
        step_s=1.0, controller={"busy": 0.1, "messages": 3, "elapsed_s": 1.0},
    )  # fmt: skip


def test_busy_fractions_are_busy_seconds_over_the_windows_they_fell_in():
    """A short step interval (0.1 s) after a long batch: over the step's interval the generator
    would read 20x busy; over its own windows, 2 s of 2.5."""
    routes = Routes.of({"generator": 2, "reward": 1, "trainer": 1})
    gen = {"generate_s": 1.8, "weight_load_s": 0.2, "gen_window_s": 2.5}
    scored = collections.Counter(score_s=0.3, window_s=1.2)
    m = StepDone(step=3, version=4, metrics={"train_s": 0.5, "weight_send_s": 0.1, "window_s": 0.8})
    busy = step_record(
        m, gen, scored, {}, routes=routes, data_stats={}, step_s=0.1,
        controller={"busy": 0.1, "messages": 3, "elapsed_s": 1.0},
    )["busy"]  # fmt: skip
    assert busy == {"generator": 0.8, "reward": 0.25, "trainer": 0.75, "controller": 0.1}


def test_summary_means_over_the_first_and_last_ten_steps():
    history = [{"reward_mean": float(i), "correct_mean": None} for i in range(12)]
    s = summary(history, [], {"prompts_too_long": 1}, wall_s=3.0)
    assert s["train_reward_first10"] == pytest.approx(4.5) and s["train_reward_last10"] == pytest.approx(6.5)
    assert s["train_correct_first10"] is None and s["prompts_too_long"] == 1 and "eval" not in s
