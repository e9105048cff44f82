"""Multi-turn episodes end to end (bounded in time): turns as requests, observations masked.

A whole job (controller, a streaming generator, reward, trainer) with an environment whose
episodes take exactly three turns: the step line counts them, and the trainer's token count
shows that only sampled tokens were trained on (the observations between turns are masked).
"""

from __future__ import annotations

import json

import pytest

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S

pytestmark = pytest.mark.timeout(900)
STEPS, TURN = 4, 6  # steps; tokens per sampled turn (the sim engine's fixed length)


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
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True)
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
