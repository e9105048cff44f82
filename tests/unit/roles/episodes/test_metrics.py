"""roles/episodes/metrics.py: a step's episode sums and figures, and the environment's rewards."""

from __future__ import annotations

import numpy as np
import pytest

from roles.episodes.metrics import add_sums, episode_bonus, episode_failed, episode_figures, episode_sums, final_turn

pytestmark = pytest.mark.timeout(60)


def _info(turns, calls, errors, end, obs=3, latency=0.1):
    return {
        "turns": turns,
        "tool_calls": calls,
        "tool_errors": errors,
        "end": end,
        "observation_tokens": obs,
        "tool_latency_s": latency,
        "env_errors": 0,
        "final_start": 2,
        "turn_reward": 0.5,
        "env_reward": None,
    }


def test_sums_from_two_ranks_add_up_to_the_step_figures():
    a = episode_sums([_info(2, 1, 0, "done"), _info(3, 2, 1, "max_turns")], [np.ones(10), np.ones(20)])
    b = episode_sums([_info(1, 0, 0, "token_budget", obs=0, latency=0.0)], [np.ones(6)])
    total = {}
    add_sums(total, a)
    add_sums(total, b)
    f = episode_figures(total)
    assert f["episode_turns_mean"] == pytest.approx(2.0) and f["episode_tokens_mean"] == pytest.approx(12.0)
    assert f["tool_calls_per_episode"] == pytest.approx(1.0) and f["tool_call_rate"] == pytest.approx(2 / 3)
    assert f["tool_error_rate"] == pytest.approx(1 / 3) and f["tool_latency_mean_s"] == pytest.approx(0.2 / 3)
    assert f["ended_max_turns_share"] == pytest.approx(1 / 3) and f["ended_token_budget_share"] == pytest.approx(1 / 3)
    assert f["ended_error_share"] == 0.0 and episode_figures({}) == {}


def test_the_environment_adds_its_rewards_and_a_failed_episode_is_marked():
    assert episode_bonus({"turn_reward": 0.5, "env_reward": None}) == 0.5
    assert episode_bonus({"turn_reward": 0.5, "env_reward": 1.0}) == 1.5
    assert episode_failed({"end": "error"}) and not episode_failed({"end": "max_turns"})


def test_the_task_reward_reads_the_final_turn_only():
    ids = np.arange(6)
    assert final_turn(ids, {"final_start": 4}).tolist() == [4, 5]
    assert final_turn(ids, None).tolist() == ids.tolist()
