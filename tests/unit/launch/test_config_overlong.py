"""launch/config.py (launch/combinations.py): reward.overlong, DAPO's soft over-length penalty:
its forms, its bounds, and the longest response it ramps up to."""

from __future__ import annotations

import pytest

from launch import config
from launch.combinations import overlong_max_length
from support.role_maps import config_error

pytestmark = pytest.mark.timeout(60)


def test_the_penalty_ramps_up_to_max_new_tokens_by_default(base_config):
    base_config["reward"] = {"name": "arith_exact", "overlong": {"buffer": 2}}  # the one-component shorthand
    cfg = config.parse(base_config)
    assert cfg.reward.overlong.buffer == 2 and cfg.reward.components[0].name == "arith_exact"
    assert overlong_max_length(cfg) == base_config["rollout"]["max_new_tokens"]


def test_the_tasks_default_reward_keeps_the_penalty(base_config):
    base_config["reward"] = {"overlong": {"buffer": 3, "max_length": 8, "weight": 0.5}}
    cfg = config.parse(base_config)
    assert cfg.reward.components[0].name == "arith_exact" and overlong_max_length(cfg) == 8
    assert cfg.reward.overlong.weight == 0.5


def test_an_episode_ramps_up_to_its_token_budget(base_config):
    base_config["rollout"]["mode"] = "stream"
    base_config["environment"] = {"name": "tools", "tools": ["calculator"], "max_turns": 3}
    base_config["reward"] = {"name": "arith_exact", "overlong": {"buffer": 6}}
    assert overlong_max_length(config.parse(base_config)) == 3 * base_config["rollout"]["max_new_tokens"]


def test_a_buffer_longer_than_the_longest_response_is_named(base_config):
    base_config["reward"] = {"overlong": {"buffer": 5}}
    assert "reward.overlong.buffer (5) exceeds the longest response (4, rollout.max_new_tokens)" in config_error(
        base_config
    )


@pytest.mark.parametrize(
    "overlong, named",
    [({"buffer": 0}, "reward.overlong.buffer"), ({"buffer": 2, "weight": -1.0}, "reward.overlong.weight"),
     ({}, "reward.overlong.buffer"), ({"buffer": 2, "cache": 3}, "reward.overlong.cache")],
)  # fmt: skip
def test_bad_penalty_settings_are_named(base_config, overlong, named):
    base_config["reward"] = {"overlong": overlong}
    assert named in config_error(base_config)
