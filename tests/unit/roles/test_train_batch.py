"""roles/train_batch.py: a trainer's rows for a step, and what an all-equal group still counts."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from launch import config
from roles.protocol import Rollout
from roles.train_batch import Tally, collect, loss_mask, step_metrics


def _group(i, rewards, version=0):
    return Rollout(
        example_id=i,
        group_id=i,
        step=0,
        prompt_ids=np.array([3, 4], dtype=np.int32),
        response_ids=[np.arange(3, 3 + n, dtype=np.int32) for n in range(1, len(rewards) + 1)],
        logprobs=[np.full(n, -0.5, dtype=np.float32) for n in range(1, len(rewards) + 1)],
        finish_reasons=["stop"] * len(rewards),
        policy_version=version,
        rewards=list(rewards),
    )


def _algorithm(base_config, skip=True):
    raw = copy.deepcopy(base_config)
    raw["algorithm"]["skip_zero_advantage"] = skip
    return config.parse(raw).algorithm


def test_all_equal_groups_are_left_out_but_their_tokens_count(base_config):
    groups = [_group(1, [1.0, 0.0]), _group(2, [1.0, 1.0], version=1)]
    batch = collect(groups, _algorithm(base_config), version=2)
    assert len(batch.responses) == 2 and batch.advs == pytest.approx([0.5, -0.5])
    assert batch.tokens == 6 and batch.rewards == [1.0, 0.0, 1.0, 1.0] and batch.staleness == [2, 1]
    assert (batch.id_sum, batch.id_sqsum) == (3.0, 5.0)
    assert len(collect(groups, _algorithm(base_config, skip=False), version=2).responses) == 4


def test_a_rank_with_no_rows_fills_with_its_first_sample(base_config):
    groups = [_group(1, [1.0, 1.0])]
    batch = collect(groups, _algorithm(base_config), version=0)
    assert batch.responses == []
    prompts, responses, mus, advs, masks = batch.filler(groups[0])
    assert len(prompts) == len(responses) == len(mus) == 1 and advs == [0.0] and masks == [None]


def test_an_episode_trains_its_sampled_tokens_only(base_config):
    group = _group(1, [1.0, 0.0])
    group.loss_masks = [np.array([1], np.uint8), np.array([1, 0], np.uint8)]  # one observation token
    batch = collect([group], _algorithm(base_config), version=0)
    assert batch.tokens == 2  # of 3: the observation is not in the token mean
    assert [m.tolist() for m in batch.masks] == [[1], [1, 0]]
    real = torch.ones(2, 2, dtype=torch.bool)
    real[0, 1] = False  # row 0 has one token
    assert loss_mask(batch.masks, real).tolist() == [[True, False], [True, False]]
    assert loss_mask([None, None], real) is real


def test_step_figures_are_token_weighted(base_config):
    batch = collect([_group(1, [1.0, 0.0])], _algorithm(base_config), version=0)
    tally = Tally()
    tally.add(0.5, {"ratio_mean": 1.0, "ratio_max": 2.0, "n_tokens": 1}, n_tok=1.0, weight=1.0)
    tally.add(0.2, {"ratio_mean": 4.0, "ratio_max": 9.0, "n_tokens": 2}, n_tok=2.0, weight=0.0)
    m = step_metrics(batch, tally, grad_norm=1.5, finite=True, train_s=0.1)
    assert m["loss"] == pytest.approx((0.5 + 0.4) / 3) and m["ratio_mean"] == pytest.approx(9 / 3)
    assert m["ratio_max"] == 2.0  # a zero-weight pass's maximum is not the step's
    assert "n_tokens" not in m and m["trained_tokens"] == 3.0 and m["nonfinite_skipped"] == 0.0
