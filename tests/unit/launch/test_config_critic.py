"""The role map's checks of a critic (algorithm.advantage: gae with world.critic ranks): each
mistake is a config error naming its field, before any work."""

from __future__ import annotations

import copy
import json

import pytest

from launch import config


def _gae(base_config, critics=1, **algorithm):
    raw = copy.deepcopy(base_config)
    raw["world"]["critic"] = critics
    raw["algorithm"].update({"advantage": "gae", "loss": "ppo", **algorithm})
    return raw


def test_a_critic_for_gae_is_accepted_and_takes_the_ranks_after_the_trainers(base_config, dummy_model):
    # The dummy model is a llama config: a family with a token-classification (value) head.
    cfg = config.parse(_gae(base_config, critics=2, gamma=0.99, lam=0.9))
    assert cfg.world.roles_by_rank()[-3:] == ["trainer", "critic", "critic"]
    assert cfg.routes().critics == 2 and cfg.algorithm.gamma == 0.99


def test_gae_without_critic_ranks_names_the_field(base_config):
    raw = _gae(base_config)
    del raw["world"]["critic"]
    with pytest.raises(config.ConfigError, match=r"advantage: gae needs critic ranks \(world.critic\)"):
        config.parse(raw)


def test_critic_ranks_without_gae_name_the_field(base_config):
    raw = copy.deepcopy(base_config)
    raw["world"]["critic"] = 1
    with pytest.raises(config.ConfigError, match=r"world.critic \(1 ranks\).*advantage: gae"):
        config.parse(raw)


@pytest.mark.parametrize("field, value", [("gamma", 1.5), ("lam", -0.1)])
def test_gamma_and_lambda_outside_zero_one_name_the_field(base_config, field, value):
    with pytest.raises(config.ConfigError, match=rf"algorithm.{field}"):
        config.parse(_gae(base_config, **{field: value}))


def test_a_critic_path_that_cannot_carry_a_value_head_names_the_field(base_config, tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "no-such-family"}))
    raw = _gae(base_config)
    raw["critic"] = {"path": str(folder)}
    with pytest.raises(config.ConfigError, match=r"critic.path: .*cannot carry a value head"):
        config.parse(raw)


def test_colocated_ranks_cannot_host_a_critic(base_config):
    raw = _gae(base_config)
    raw["world"].update({"generator": 0, "trainer": 0, "colocated": 2})
    raw["run"]["max_staleness"] = 0
    with pytest.raises(config.ConfigError, match="colocated ranks cannot host a critic"):
        config.parse(raw)


def test_one_sample_per_prompt_is_fine_with_a_critic(base_config):
    raw = _gae(base_config)
    raw["rollout"]["samples_per_prompt"] = 1
    assert config.parse(raw).rollout.samples_per_prompt == 1
