"""What is done to a learned reward's raw scores: each option, in order, failures kept out."""

from __future__ import annotations

import math

import pytest

from roles.rewards.learned.base import LearnedConfig
from roles.rewards.learned.shaping import Shaping


def shape(groups, **options):
    return Shaping(LearnedConfig(**options))(groups)


def test_none_passes_raw_scores_and_failures_score_zero():
    assert shape([[1.5, None, -2.0]]) == [[1.5, 0.0, -2.0]]


def test_group_normalises_each_group_by_its_own_scored_samples():
    out = shape([[1.0, 3.0, None], [5.0, 5.0]], normalize="group")
    assert out[0] == pytest.approx([-1.0, 1.0, 0.0])
    assert out[1] == [0.0, 0.0]  # no spread: only centred


def test_scale_offset_and_clip_apply_after_normalising():
    out = shape([[1.0, 3.0]], normalize="group", scale=3.0, offset=0.5, clip=2.0)
    assert out == [[-2.0, 2.0]]  # (-1 * 3 + 0.5) and (1 * 3 + 0.5), clipped to [-2, 2]


def test_running_statistics_cover_every_call_and_survive_a_checkpoint():
    s = Shaping(LearnedConfig(normalize="running"))
    s([[0.0, 2.0]])
    out = s([[4.0]])  # pool {0, 2, 4}: mean 2, std sqrt(8/3)
    assert out == [[pytest.approx(2.0 / math.sqrt(8 / 3))]]
    restored = Shaping(LearnedConfig(normalize="running"))
    restored.load_state_dict(s.state_dict())
    fresh_pool = Shaping(LearnedConfig(normalize="running"))
    assert restored([[1.0]]) == s([[1.0]]) != fresh_pool([[1.0]])


def test_options_are_checked():
    with pytest.raises(ValueError, match="clip"):
        LearnedConfig(clip=0.0)
    with pytest.raises(ValueError, match="normalize"):
        LearnedConfig(normalize="batch")
