"""launch/config.py (launch/combinations.py): rollout.dynamic_sampling, its bounds, and what it
may be combined with (exit 2 naming the field)."""

from __future__ import annotations

import pytest

from launch import config
from support.role_maps import config_error

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("mode, staleness", [("batch", 0), ("batch", 1), ("stream", 0), ("stream", 4)])
def test_dynamic_sampling_runs_in_either_rollout_mode_at_any_staleness(base_config, mode, staleness):
    base_config["rollout"].update(mode=mode, dynamic_sampling=True)
    base_config["run"]["max_staleness"] = staleness
    cfg = config.parse(base_config)
    assert cfg.rollout.dynamic_sampling.enabled and cfg.rollout.dynamic_sampling.max_refill_rounds == 2


@pytest.mark.parametrize(
    "field, value", [("max_refill_rounds", 0), ("max_refill_rounds", 1.5), ("max_spares", -1.0), ("max_spares", 99.0)]
)
def test_bounds_out_of_range_are_named(base_config, field, value):
    base_config["rollout"]["dynamic_sampling"] = {field: value}
    assert f"rollout.dynamic_sampling.{field}" in config_error(base_config)


def test_an_unknown_option_is_named(base_config):
    base_config["rollout"]["dynamic_sampling"] = {"max_rounds": 3}
    assert "rollout.dynamic_sampling.max_rounds" in config_error(base_config)


def test_colocated_ranks_cannot_refill_a_step(base_config):
    base_config["world"] = {"controller": 1, "generator": 0, "trainer": 0, "colocated": 2, "reward": 1}
    base_config["run"]["max_staleness"] = 0
    base_config["rollout"]["dynamic_sampling"] = True
    assert "rollout.dynamic_sampling: colocated ranks" in config_error(base_config)


def test_critic_advantages_are_not_dropped(base_config):
    base_config["rollout"]["dynamic_sampling"] = True
    base_config["algorithm"].update(advantage="gae", loss="ppo")
    base_config["world"]["critic"] = 1
    assert "algorithm.advantage: gae" in config_error(base_config)


def test_one_sample_per_prompt_would_drop_every_group(base_config):
    base_config["rollout"].update(dynamic_sampling=True, samples_per_prompt=1)
    assert "rollout.samples_per_prompt 1 every group scores the same" in config_error(base_config)
