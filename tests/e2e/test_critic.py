"""PPO with a critic end to end under mpirun (bounded in time): critic ranks compute GAE
advantages from a value model while the trainer trains, and the policy learns the arithmetic
demo as with group baselines."""

from __future__ import annotations

import pytest

from examples.arith import prepare as arith
from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S

pytestmark = pytest.mark.timeout(900)


def _run(tmp_path, sft_model, steps: int, **overrides) -> list[dict]:
    base = {
        "model": {"path": str(sft_model)},
        "run": {"out": str(tmp_path / "run"), "progress": False, "steps": steps},
        "world": {"critic": 1},
        "algorithm": {"advantage": "gae", "loss": "ppo", "lam": 0.95, "lr": 1.0e-4},
        "critic": {"lr": 1.0e-3},
    }
    cfg = recipe.write_config(CONFIG, tmp_path / "run", recipe.merge_overrides(base, overrides))
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True)
    return recipe.read_metrics(tmp_path / "run")


def test_ppo_with_a_critic_learns_the_arith_demo(tmp_path, sft_model):
    steps = 150
    metrics = _run(tmp_path, sft_model, steps)
    assert [m["step"] for m in metrics] == list(range(steps))
    critic = [m["critic"] for m in metrics]
    # The value model learns the returns: its loss falls and it explains them better.
    first, last = critic[:10], critic[-10:]
    assert sum(c["value_loss"] for c in last) < sum(c["value_loss"] for c in first)
    assert sum(c["explained_variance"] for c in last) > sum(c["explained_variance"] for c in first)
    before = arith.heldout_accuracy(sft_model)
    after = arith.heldout_accuracy(tmp_path / "run" / "policy")
    print(f"PPO with a critic: held-out {before:.3f} -> {after:.3f}")
    assert after >= before + 0.05, (before, after)


def test_aipo_takes_gae_advantages_and_the_policy_waits_for_the_critics_warm_up(tmp_path, sft_model):
    """AIPO (ratio clipped from above) with a critic's per-token advantages, two critic ranks
    sharding the value model (and the KL penalty's reference), and two critic-only steps
    first: the policy's weights do not move until the critic has warmed up, then they do."""
    steps = 6
    metrics = _run(
        tmp_path,
        sft_model,
        steps,
        world={"critic": 2},
        algorithm={"loss": "aipo", "kl_coef": 0.05},  # with gae: a per-token KL penalty in the reward
        rollout={"prompts_per_step": 4},
        critic={"warmup_steps": 2, "updates_per_step": 2},
    )
    assert [m["step"] for m in metrics] == list(range(steps))
    warm = [m["trainer"].get("critic_warmup", 0.0) for m in metrics]
    assert warm == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert all(m["trainer"]["grad_norm"] == 0.0 for m in metrics[:2])
    assert all(m["trainer"]["grad_norm"] > 0.0 for m in metrics[2:])
    assert all(m["critic"]["grad_norm"] > 0.0 for m in metrics)  # the critic learns from the first step
    # The policy moves away from the reference after the warm-up: the penalty grows from 0.
    kl = [m["critic"]["kl_ref_mean"] for m in metrics]
    assert all(abs(k) < 1e-4 for k in kl[:3]) and max(abs(k) for k in kl[3:]) > 1e-4, kl
