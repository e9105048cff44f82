"""The trainer's step with each loss option on a tiny model, without MPI: the aggregations give
the step's gradient whatever the micro-batching; every option trains."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roles.trainer import TrainerActor
from support.tiny_models import small_llama
from support.trainers import make_trainer, random_group

pytestmark = pytest.mark.timeout(120)


_tiny_llama = small_llama


def _trainer(base_config, model, reference=None, **algorithm) -> TrainerActor:
    return make_trainer(base_config, model, reference=reference, **{"lr": 1e-2, "grad_clip": 0.0, **algorithm})


def _groups(seed=0, version=0):
    rng = np.random.default_rng(seed)
    out = []
    for i, rewards in enumerate([[1, 0, 1, 0], [1, 1, 1, 1], [0, 1, 1, 1]]):
        lens = rng.integers(1, 7, len(rewards))
        out.append(random_group(rng, i, lens, rewards, vocab=17, version=version))
    return out


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant"])
def test_micro_batching_leaves_the_update_unchanged(base_config, agg):
    """2-row micro-batches against one batch of every row: the same step, to float rounding."""
    models, metrics = {mb: _tiny_llama() for mb in (2, 64)}, {}
    for mb, model in models.items():
        metrics[mb] = _trainer(base_config, model, loss="grpo", loss_agg=agg, micro_batch=mb).train_on(_groups())
    # The gradients (Adam's first step is about lr * sign(grad): it would magnify rounding near 0)
    for (name, a), b in zip(models[2].named_parameters(), models[64].parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-8), name
    assert any(not torch.equal(a, b) for a, b in zip(_tiny_llama().parameters(), models[2].parameters()))
    assert metrics[2]["loss"] == pytest.approx(metrics[64]["loss"], rel=1e-5, abs=1e-7)


def test_aggregations_differ_from_each_other(base_config):
    losses = {agg: _trainer(base_config, _tiny_llama(), loss="grpo", loss_agg=agg).train_on(_groups())["loss"]
              for agg in ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean")}  # fmt: skip
    assert len({round(v, 7) for v in losses.values()}) == 3, losses


@pytest.mark.parametrize(
    "options",
    [
        {"loss": "decoupled"},
        {"loss": "decoupled", "proximal": "loglinear", "decoupled_cap": 3.0},
        {"loss": "ppo", "clip_eps_high": 0.28, "correction": "tis"},
        {"loss": "grpo", "correction": "icepop", "correction_low": 0.2, "correction_high": 5.0},
        {"loss": "aipo", "correction": "seq_mask", "correction_low": 0.2, "correction_high": 5.0},
        {"loss": "aipo", "entropy_coef": 0.01},
    ],
)
def test_each_option_trains_a_step(base_config, options):
    model = _tiny_llama()
    before = [p.detach().clone() for p in model.parameters()]
    m = _trainer(base_config, model, **options).train_on(_groups(version=0))
    assert m["nonfinite_skipped"] == 0.0 and np.isfinite(m["loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    if "correction" in options:
        assert 0.0 <= m["correction_masked_frac"] <= 1.0 and 0.0 <= m["correction_truncated_frac"] <= 1.0
    if "entropy_coef" in options:
        assert m["entropy_mean"] > 0 and m["trained_samples"] == 12  # all-equal groups feed the bonus


def test_loglinear_reads_each_samples_staleness(base_config):
    """At staleness 0 pi_prox is mu (r = pi/mu); a step later it moves towards pi."""
    trainer = _trainer(base_config, _tiny_llama(), loss="decoupled", proximal="loglinear")
    fresh = trainer.train_on(_groups(version=0))
    trainer.version = 3
    stale = trainer.train_on(_groups(version=0))
    assert fresh["behave_weight_mean"] == pytest.approx(1.0)  # w = pi_prox/mu = 1 when pi_prox = mu
    assert stale["behave_weight_mean"] != pytest.approx(1.0)


@pytest.mark.parametrize("agg", ["seq_mean_token_sum", "seq_mean_token_mean", "constant"])
def test_the_steps_gradient_is_the_formulas_over_every_sample(base_config, agg):
    """The trainer (all-equal group left out, 2-row micro-batches) against the loss of every
    sample at once: the left-out sequences still count in the step's sequences."""
    from roles.algorithm.logprobs import response_logprobs
    from roles.algorithm.losses import policy_loss
    from roles.train_batch import collect, pad

    trainer = _trainer(base_config, _tiny_llama(), loss="grpo", loss_agg=agg, micro_batch=2)
    groups = _groups()
    trainer.train_on(groups)
    model = _tiny_llama()
    every = collect(groups, trainer.config.model_copy(update={"skip_zero_advantage": False}), 0)
    logp, mask = response_logprobs(model, every.prompts, every.responses, trainer.temperature)
    mu = pad(every.mus, 0.0, torch.float32)
    loss, _ = policy_loss(trainer.config, logp, mu, torch.tensor(every.advs), mask, constant=trainer.agg_constant)
    loss.backward()
    for (name, a), b in zip(trainer.model.named_parameters(), model.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-8), name


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_kl_in_reward_shapes_each_samples_reward_before_its_group_baseline(base_config, estimator):
    """Against the formula per sample, one forward each: r - kl_coef x sum_t k(log ref - log mu);
    2-row micro-batches; the all-equal group then has signal and is trained."""
    from roles.algorithm.advantages import group_advantages
    from roles.algorithm.kl import kl_terms
    from roles.algorithm.logprobs import response_logprobs
    from roles.train_batch import collect

    reference = _tiny_llama(seed=1).requires_grad_(False)
    opts = {"loss": "aipo", "kl_coef": 0.05, "kl_in_reward": True, "kl_estimator": estimator, "micro_batch": 2}
    trainer = _trainer(base_config, _tiny_llama(), reference=reference, **opts)
    groups = _groups()
    penalties = trainer._kl_penalties(groups)
    for g, pen in zip(groups, penalties):
        for ids, lp, p in zip(g.response_ids, g.logprobs, pen):
            ref, mask = response_logprobs(reference, [g.prompt_ids], [ids], trainer.temperature)
            mu = torch.as_tensor(lp).reshape(1, -1)
            assert p == pytest.approx(0.05 * float(kl_terms(mu, ref, mask, estimator).sum()), rel=1e-5, abs=1e-7)
    batch = collect(groups, trainer.config, 0, penalties)
    want = [a for g, pen in zip(groups, penalties) for a in group_advantages(np.asarray(g.rewards) - pen, "group_mean")]
    assert batch.advs == pytest.approx(want, abs=1e-6) and len(batch.advs) == 12  # the all-equal group too
    assert batch.rewards == [r for g in groups for r in g.rewards]  # the task's rewards are reported
    m = trainer.train_on(groups)
    assert m["trained_samples"] == 12 and "kl_ref" not in m  # no KL term in the loss
    assert m["kl_reward_penalty"] == pytest.approx(float(np.mean(np.concatenate(penalties))), rel=1e-4)
