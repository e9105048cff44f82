"""A learned reward model as the run's only reward, end to end under mpirun (bounded in time).

The reward model is trained inside the test to prefer responses that end in an even digit
(``support.reward_models``); a weight-0 verifier (``support.text_properties:ends_even``)
logs that property's share per step without adding to the reward. The policy learns it.
"""

from __future__ import annotations

import os

import pytest

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S
from support.paths import REPO
from support.reward_models import train_parity_reward_model

pytestmark = pytest.mark.timeout(900)


def _run(tmp_path, sft_model, reward, steps: int, **more) -> list[dict]:
    overrides = {
        "model": {"path": str(sft_model)},
        "run": {"out": str(tmp_path / "run"), "progress": False, "steps": steps},
        "algorithm": {"lr": 1.0e-4},
        "reward": reward,  # a list replaces the base config's reward (a mapping would merge into it)
        **more,
    }
    cfg = recipe.write_config(CONFIG, tmp_path / "run", recipe.merge_overrides({}, overrides))
    pythonpath = os.pathsep.join([str(REPO / "tests"), str(REPO)])
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env={"PYTHONPATH": pythonpath})
    return recipe.read_metrics(tmp_path / "run")


def _mean(xs):
    return sum(xs) / len(xs)


def _components(label: str) -> list[dict]:
    return [
        {"name": "model", "path": label, "label": "rm"},
        {"name": "support.text_properties:ends_even", "weight": 0.0},
    ]


@pytest.mark.parametrize("tokenizer", ["policy", "chat_bpe"])
def test_the_policy_learns_what_the_reward_model_prefers(tmp_path, sft_model, tokenizer):
    if tokenizer == "policy":
        tokenizer_dir = sft_model
    else:  # another family: a byte-level BPE with a ChatML template, unlike the policy's characters
        from examples.toy.tiny_bpe import save_bpe_chat_tokenizer

        tokenizer_dir = tmp_path / "bpe"
        save_bpe_chat_tokenizer(tokenizer_dir, [f"{a}+{b}={a + b}" for a in range(40) for b in range(40)], 300)
    rm = train_parity_reward_model(tmp_path / "rm", tokenizer_dir, steps=300)
    steps = 40
    metrics = _run(tmp_path, sft_model, _components(str(rm)), steps)
    assert [m["step"] for m in metrics] == list(range(steps))
    share = [m["reward_components"]["ends_even"] for m in metrics]
    rm_score = [m["reward_components"]["rm"] for m in metrics]
    first, last = _mean(share[:8]), _mean(share[-8:])
    rm_first, rm_last = _mean(rm_score[:8]), _mean(rm_score[-8:])
    print(f"{tokenizer}: ends_even share {first:.3f} -> {last:.3f}; rm {rm_first:.3f} -> {rm_last:.3f}")
    assert last >= first + 0.2, (first, last, share)
    assert rm_last > rm_first + 0.3, rm_score
    assert all(m["verifier_failures"] == 0 for m in metrics)


@pytest.mark.parametrize("mode", ["batch", pytest.param("stream", marks=pytest.mark.matrix)])
def test_two_reward_ranks_share_one_sharded_reward_model(tmp_path, sft_model, mode):
    """world.reward: 2 with shard: true: the reward ranks score in lockstep (each forward pass
    gathers the model from both) and stop together, with groups routed to both; with streamed
    rollouts the groups reach them one by one."""
    rm = train_parity_reward_model(tmp_path / "rm", sft_model, steps=300)
    reward = [{"name": "model", "path": str(rm), "label": "rm", "shard": True}]
    steps = 4
    overrides = {"world": {"reward": 2}, "rollout": {"prompts_per_step": 4, "mode": mode}}
    metrics = _run(tmp_path, sft_model, reward, steps, **overrides)
    assert [m["step"] for m in metrics] == list(range(steps))
    assert all(m["verifier_failures"] == 0 and m["reward_components"]["rm"] is not None for m in metrics)
