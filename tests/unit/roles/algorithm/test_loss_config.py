"""algorithm: options out of range, or that do not combine, are refused naming the field."""

import copy

import pytest

from launch import config
from launch.config import ConfigError

pytestmark = pytest.mark.timeout(30)


def _parse(base_config, **algorithm):
    raw = copy.deepcopy(base_config)
    raw["algorithm"].update(algorithm)
    return config.parse(raw).algorithm


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"loss": "grpo", "clip_eps_high": 0.0}, "algorithm.clip_eps_high"),
        ({"loss": "grpo", "clip_eps_high": -0.1}, "algorithm.clip_eps_high"),
        ({"loss": "decoupled", "decoupled_cap": 0.5}, "algorithm.decoupled_cap"),
        ({"correction": "tis", "loss": "grpo", "correction_cap": 0.9}, "algorithm.correction_cap"),
        ({"correction": "icepop", "correction_low": 0.0}, "algorithm.correction_low"),
        ({"correction": "icepop", "correction_low": 1.5}, "algorithm.correction_low"),
        ({"correction": "icepop", "correction_high": 0.9}, "algorithm.correction_high"),
        ({"correction": "seq_mask", "correction_low": 1.0, "correction_high": 1.0}, "correction_low (1.0) must be"),
        ({"loss_agg": "constant", "loss_agg_constant": 0}, "algorithm.loss_agg_constant"),
        ({"loss_agg": "mean"}, "algorithm.loss_agg"),
        ({"loss": "grpo", "kl_estimator": "k4"}, "algorithm.kl_estimator"),
        ({"entropy_coef": -0.1}, "algorithm.entropy_coef"),
        ({"proximal": "exact"}, "algorithm.proximal"),
    ],
)  # fmt: skip
def test_thresholds_out_of_range_are_refused_naming_the_field(base_config, options, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _parse(base_config, **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"loss": "aipo", "clip_eps_high": 0.28}, "clip_eps_high applies to loss: grpo, ppo, decoupled"),
        ({"loss": "grpo", "proximal": "loglinear"}, "algorithm.proximal applies to loss: decoupled"),
        ({"loss": "ppo", "decoupled_cap": 5.0}, "algorithm.decoupled_cap applies to loss: decoupled"),
        ({"loss": "decoupled", "correction": "tis"}, "with loss: decoupled, which already carries"),
        ({"loss": "aipo", "correction": "tis"}, "tis does not combine with loss: aipo"),
        ({"correction": "icepop", "correction_cap": 3.0}, "algorithm.correction_cap is a threshold of another"),
        ({"correction_low": 0.3}, "correction_low is a threshold of another correction; correction is 'none'"),
        ({"loss_agg": "token_mean", "loss_agg_constant": 512}, "loss_agg_constant applies to loss_agg: constant"),
        ({"loss": "aipo", "kl_coef": 0.1}, "algorithm.kl_coef"),
    ],
)  # fmt: skip
def test_options_that_do_not_combine_are_refused_saying_why(base_config, options, message):
    with pytest.raises(ConfigError, match=message):
        _parse(base_config, **options)


def test_the_options_that_combine_parse(base_config):
    a = _parse(base_config, loss="decoupled", proximal="loglinear", decoupled_cap=5.0, correction="icepop",
               correction_low=0.2, correction_high=5.0, loss_agg="constant", loss_agg_constant=256, kl_coef=0.01,
               kl_estimator="k2", entropy_coef=0.001, clip_eps_high=0.28)  # fmt: skip
    assert (a.loss, a.proximal, a.correction, a.loss_agg, a.kl_estimator) == (
        "decoupled", "loglinear", "icepop", "constant", "k2",
    )  # fmt: skip
    assert a.trains_all_groups
    assert _parse(base_config, loss="grpo", correction="tis", correction_cap=3.0).correction_cap == 3.0
    default = _parse(base_config)
    assert (default.loss, default.correction, default.loss_agg, default.kl_estimator) == (
        "aipo",
        "none",
        "token_mean",
        "k3",
    )


def test_kl_in_reward_takes_any_loss_and_loads_the_reference(base_config):
    algo = _parse(base_config, loss="aipo", kl_coef=0.05, kl_in_reward=True)
    assert algo.kl_in_group_reward and algo.needs_reference and not algo.kl_in_loss and not algo.trains_all_groups
    grpo = _parse(base_config, loss="grpo", kl_coef=0.05)
    assert grpo.kl_in_loss and grpo.needs_reference and not grpo.kl_in_group_reward
    assert not _parse(base_config).needs_reference


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kl_in_reward": True}, "algorithm.kl_in_reward puts the kl_coef term in the reward, but kl_coef is 0"),
        ({"kl_in_reward": True, "kl_coef": 0.1, "advantage": "gae", "loss": "ppo"}, "the critic's reward holds"),
        ({"loss": "aipo", "kl_coef": 0.1}, "or as a penalty in the reward (kl_in_reward: true"),
    ],
)
def test_kl_in_reward_combinations_are_named(base_config, options, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _parse(base_config, **options)
