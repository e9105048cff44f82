"""launch.preflight: the role map checked against this machine (the model's context, the world
size) after its values, each refusal one ConfigError line naming the field."""

from __future__ import annotations

import copy
import json

import pytest

from launch import config, preflight
from launch.config import ConfigError


def parse(base, **sections):
    """The role map ``base`` with whole ``sections`` replaced, as the launch takes it."""
    return preflight.parse({**copy.deepcopy(base), **sections})


def refused(base, match, **sections):
    with pytest.raises(ConfigError, match=match):
        parse(base, **sections)


def test_prompt_and_response_must_fit_the_models_context(base_config, dummy_model):
    (dummy_model / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 64}))
    assert parse(base_config).prompt_token_limit() == 64 - 4
    assert parse(base_config, eval={"max_new_tokens": 10}).prompt_token_limit() == 64 - 10
    refused(
        base_config,
        r"task\.max_prompt_tokens \(62\) \+ rollout\.max_new_tokens \(4\) exceeds .* 64",
        task={"name": "arith", "max_prompt_tokens": 62},
    )
    refused(base_config, r"eval\.max_new_tokens \(64\) leaves no room", eval={"max_new_tokens": 64})
    assert parse(base_config, task={"name": "arith", "max_prompt_tokens": 60}).prompt_token_limit() == 60


@pytest.mark.parametrize("size", [1, 3, 5])
def test_wrong_rank_count(base_config, size):
    cfg = config.parse(base_config)
    preflight.check_world_size(cfg, 4, "roles.yaml")  # the right count passes
    with pytest.raises(ConfigError) as info:
        preflight.check_world_size(cfg, size, "roles.yaml")
    text = str(info.value)
    assert text.startswith("roles.yaml: world: ")
    assert "4 ranks" in text and f"has {size}" in text and "mpirun -n 4" in text
