"""Multi-turn episodes end to end (bounded in time): turns as requests, observations masked.

A whole job (controller, a streaming generator, reward, trainer) with an environment whose
episodes take exactly three turns: the step line counts them, and the trainer's token count
shows that only sampled tokens were trained on (the observations between turns are masked).
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S, kill_after_checkpoint
from support.paths import REPO

pytestmark = pytest.mark.timeout(900)
STEPS, TURN = 4, 6  # steps; tokens per sampled turn (the sim engine's fixed length)
# The ranks import the test environments (tests/support/environment_plugins.py) by name.
PLUGINS_ENV = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer
    from support.tool_chat import tool_chat_tokenizer

    root = tmp_path_factory.mktemp("tool_model")
    tok = tool_chat_tokenizer(root / "tok")
    return build_tiny_llama_for_tokenizer(
        root / "model", tok, hidden_size=64, num_layers=1, num_heads=2, max_position_embeddings=256
    )


@pytest.mark.slow
def test_episodes_of_three_turns_train_on_their_sampled_tokens_only(tmp_path, tool_model):
    prompts, samples = 4, 2
    overrides = {
        "model": {"path": str(tool_model)},
        "world": {
            "generator": {"engine": "sim", "sim": {"per_token_s": 0.0005, "vocab": 300, "lengths": {"mean": TURN}}}
        },
        "rollout": {"mode": "stream", "prompts_per_step": prompts, "samples_per_prompt": samples, "max_new_tokens": 8},
        "environment": {"name": "support.environment_plugins:TurnsEnv", "turns": 3, "max_episode_tokens": 200},
        "run": {"steps": STEPS, "max_staleness": 1, "out": str(tmp_path), "progress": False},
        "logging": {"samples_per_step": 2},
    }
    cfg = recipe.write_config(CONFIG, tmp_path, overrides)
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env=PLUGINS_ENV)
    metrics = recipe.read_metrics(tmp_path)
    assert [m["step"] for m in metrics] == list(range(STEPS))
    for m in metrics:
        e = m["episodes"]
        assert e["episode_turns_mean"] == 3.0 and e["ended_token_budget_share"] == 0.0
        assert e["tool_calls_per_episode"] == 2.0 and e["tool_error_rate"] == 0.5  # the first call of each "fails"
        assert e["observation_tokens_mean"] > 0
        assert e["episode_tokens_mean"] == pytest.approx(3 * TURN + e["observation_tokens_mean"])
        assert m["tokens"] == prompts * samples * 3 * TURN  # trained: the sampled turns, no observation
        # Groups whose episodes all scored the same are not trained on: whole episodes of sampled tokens are
        trained = m["trainer"]["trained_tokens"]
        assert trained <= m["tokens"] and trained % (3 * TURN) == 0
    assert any(m["trainer"]["trained_tokens"] > 0 for m in metrics)
    shown = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert shown and all("ok 0" in s["response"] and "ok 1" in s["response"] for s in shown)


@pytest.mark.slow
def test_an_environment_that_raises_on_some_examples_costs_those_episodes_only(tmp_path, tool_model):
    overrides = {
        "model": {"path": str(tool_model)},
        "world": {
            "generator": {"engine": "sim", "sim": {"per_token_s": 0.0005, "vocab": 300, "lengths": {"mean": TURN}}}
        },
        "rollout": {"mode": "stream", "prompts_per_step": 8, "samples_per_prompt": 2, "max_new_tokens": 8},
        "environment": {"name": "support.environment_plugins:TurnsEnv", "fail_every": 3, "max_episode_tokens": 200},
        "run": {"steps": STEPS, "max_staleness": 1, "out": str(tmp_path), "progress": False},
    }
    cfg = recipe.write_config(CONFIG, tmp_path, overrides)
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env=PLUGINS_ENV)
    metrics = recipe.read_metrics(tmp_path)
    assert [m["step"] for m in metrics] == list(range(STEPS))
    errors = sum(m["episodes"]["env_errors"] for m in metrics)
    failed = sum(m["episodes"]["ended_error_share"] for m in metrics) / STEPS
    assert errors > 0 and 0 < failed < 1  # a third of the examples fail; the rest run their three turns


@pytest.fixture(scope="module")
def calculator_model(tmp_path_factory):
    """The tool demo's model with a short warm start: it writes calculator calls and ends its
    turns (how well it copies does not matter here)."""
    from examples.tools.prepare import PrepareConfig, prepare
    from examples.toy.sft import SFTConfig

    root = tmp_path_factory.mktemp("calculator")
    quick = PrepareConfig(
        copy_sft=SFTConfig(fraction=0.25, steps=120, lr=3e-3, batch=16),
        sft=SFTConfig(fraction=0.25, steps=20, lr=1e-3, batch=16),
        eval_examples=8,
    )
    prepare(root, seed=0, config=quick)
    return root / "sft"


def _calculator_job(run_dir, model, **extra):
    overrides = {
        "model": {"path": str(model)},
        "rollout": {"prompts_per_step": 4, "samples_per_prompt": 4},
        "eval": {"every_steps": 0, "before_training": False},
        "run": {"out": str(run_dir), "progress": False, "steps": 6, "max_staleness": 0},
        "checkpoint": {"every_steps": 2, "keep_last": 2},
        **extra,
    }
    return recipe.write_config(REPO / "examples/tools/async.yaml", run_dir, overrides)


@pytest.mark.slow
def test_a_killed_run_of_tool_episodes_resumes_bit_identically_at_staleness_0(tmp_path, calculator_model):
    """The real engine, the calculator in its workers: episodes sampled after a resume are the
    uninterrupted run's, token for token, so the weights are bit-identical."""
    from safetensors.torch import load_file

    whole, broken = tmp_path / "whole", tmp_path / "broken"
    recipe.run_job(_calculator_job(whole, calculator_model), timeout_s=JOB_TIMEOUT_S, quiet=True)
    kill_after_checkpoint(_calculator_job(broken, calculator_model), broken, steps_done=2)
    recipe.run_job(_calculator_job(broken, calculator_model), timeout_s=JOB_TIMEOUT_S, quiet=True)
    a, b = recipe.read_metrics(whole), recipe.read_metrics(broken)
    assert [m["step"] for m in b] == list(range(6))
    assert any(m["episodes"]["tool_calls_per_episode"] > 0 for m in a)  # the episodes did call the tool
    for x, y in zip(a, b):
        for key in ("reward_mean", "loss", "tokens"):
            assert x[key] == y[key], (x["step"], key)
        timing = {"tool_latency_mean_s"}  # seconds: the only figure a resume may change
        assert {k: v for k, v in x["episodes"].items() if k not in timing} == {
            k: v for k, v in y["episodes"].items() if k not in timing
        }, x["step"]
    wa, wb = (load_file(str(d / "policy" / "model.safetensors")) for d in (whole, broken))
    assert all((wa[n] == wb[n]).all() for n in wa)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["torch", "vllm"])
def test_the_trainer_sees_each_sampled_turn_with_the_log_probs_it_was_sampled_with(tmp_path, calculator_model, engine):
    """On-policy (max_staleness 0), float32: the trainer's log-prob of every trained token equals
    the engine's behaviour log-prob, so every trained token sits where it was sampled, after its
    turns and observations (a token or mask off by one would show as a large mismatch)."""
    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (make test installs it)")
    cfg = _calculator_job(
        tmp_path,
        calculator_model,
        checkpoint={"every_steps": 0},
        world={"generator": {"engine": engine}},
        algorithm={"skip_zero_advantage": False},  # every episode trained, whatever it scored
    )
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True)
    metrics = recipe.read_metrics(tmp_path)
    assert any(m["episodes"]["observation_tokens_mean"] > 0 for m in metrics)  # turns after a tool result
    for m in metrics:
        assert m["trainer"]["trained_tokens"] > 0 and m["trainer"]["logp_mismatch_max"] < 1e-3, m["step"]
