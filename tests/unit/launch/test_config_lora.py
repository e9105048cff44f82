"""launch/config.py: model.lora, its bounds, the model's modules it must match, and the settings
it does not combine with (exit 2 naming the field)."""

from __future__ import annotations

import pytest

from launch import config
from support.role_maps import config_error

pytestmark = pytest.mark.timeout(60)


def test_lora_parses_with_its_defaults(base_config):
    base_config["model"]["lora"] = {"rank": 8}
    lora = config.parse(base_config).model.lora
    assert (lora.rank, lora.alpha, lora.target_modules, lora.scale) == (8, 32.0, "all-linear", 4.0)


@pytest.mark.parametrize(
    "lora, named",
    [({"rank": 0}, "model.lora.rank"), ({"alpha": -1.0}, "model.lora.alpha"), ({"dropout": 1.0}, "model.lora.dropout"),
     ({"target_modules": "all"}, "model.lora.target_modules"), ({"rnk": 4}, "model.lora.rnk")],
)  # fmt: skip
def test_bad_values_are_named(base_config, lora, named):
    base_config["model"]["lora"] = lora
    assert named in config_error(base_config)


def test_target_modules_matching_nothing_are_named_with_the_modules_there(base_config):
    base_config["model"]["lora"] = {"target_modules": ["q_proj", "query"]}
    text = config_error(base_config)
    assert "lora.target_modules: 'query' match no module of the model" in text and "q_proj" in text


@pytest.mark.parametrize(
    "generator, named",
    [({"ranks": 1, "quantization": "int8"}, "model.lora with world.generator.quantization (int8)"),
     ({"ranks": 1, "engine": "vllm", "quantization": "fp8"}, "model.lora with world.generator.quantization (fp8)")],
)  # fmt: skip
def test_generators_that_cannot_take_adapters_are_refused(base_config, generator, named):
    base_config["model"]["lora"] = {"rank": 4}
    base_config["world"]["generator"] = generator
    assert named in config_error(base_config)


@pytest.mark.parametrize(
    "generator, rank, named",
    [({"ranks": 1, "engine": "vllm", "lora_mode": "native"}, 600, "model.lora.rank 600: vLLM's LoRA"),
     ({"ranks": 1, "lora_mode": "merged"}, 4, "lora_mode applies to engine: vllm only (engine is 'torch'")],
)  # fmt: skip
def test_lora_modes_that_cannot_run_are_refused(base_config, generator, rank, named):
    base_config["model"]["lora"] = {"rank": rank}
    base_config["world"]["generator"] = generator
    assert named in config_error(base_config)


def test_a_vllm_generator_may_merge_adapters_of_any_rank(base_config):
    base_config["model"]["lora"] = {"rank": 600}
    base_config["world"]["generator"] = {"ranks": 1, "engine": "vllm"}  # lora_mode: merged, the default
    assert config.parse(base_config).world.generator.lora_mode is None
