"""The trainer's update on one rank, without MPI: what leaving out all-equal groups must keep.

Groups whose samples all scored the same have zero advantages, so they add nothing to the
gradient. ``algorithm.skip_zero_advantage`` leaves them out of the forward and backward passes;
the token mean still counts their tokens, so the update must be the same, to float rounding,
as training on every group.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roles.trainer import TrainerActor
from support.tiny_models import small_llama
from support.trainers import make_trainer, random_group


def _trainer(base_config, model, skip: bool, micro_batch: int = 4, reference=None) -> TrainerActor:
    return make_trainer(
        base_config, model, reference=reference, skip_zero_advantage=skip, micro_batch=micro_batch, lr=1e-2
    )


_tiny_llama = small_llama


def _groups(rewards_per_group, seed=0):
    rng = np.random.default_rng(seed)
    return [random_group(rng, i, rng.integers(1, 6, len(r)), r, vocab=17) for i, r in enumerate(rewards_per_group)]


MIXED = [[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [0.5, 0.5, 0.5, 0.5], [0, 1, 1, 1]]


@pytest.mark.parametrize("loss", ["aipo", "grpo"])
@pytest.mark.parametrize("advantage", ["group_mean", "group_std", "leave_one_out"])
def test_skipping_all_equal_groups_leaves_the_update_unchanged(base_config, loss, advantage):
    base_config["algorithm"].update({"loss": loss, "advantage": advantage})
    models = {skip: _tiny_llama() for skip in (False, True)}
    metrics = {}
    for skip, model in models.items():
        metrics[skip] = _trainer(base_config, model, skip).train_on(_groups(MIXED))
    for (name, a), b in zip(models[False].named_parameters(), models[True].parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), name
    moved = any(not torch.equal(a, b) for a, b in zip(_tiny_llama().parameters(), models[True].parameters()))
    assert moved, "the step changed nothing: the test would not see a difference"
    assert metrics[False]["loss"] == pytest.approx(metrics[True]["loss"], rel=1e-5, abs=1e-7)
    assert metrics[False]["grad_norm"] == pytest.approx(metrics[True]["grad_norm"], rel=1e-5)
    assert (metrics[False]["trained_samples"], metrics[True]["trained_samples"]) == (20, 8)
    assert metrics[True]["samples"] == 20 and metrics[True]["tokens"] == metrics[False]["tokens"]


def test_a_step_of_only_all_equal_groups_changes_nothing(base_config):
    model = _tiny_llama()
    before = [p.detach().clone() for p in model.parameters()]
    m = _trainer(base_config, model, skip=True).train_on(_groups([[1, 1, 1, 1], [0, 0, 0, 0]]))
    assert m["trained_samples"] == 0 and m["loss"] == 0.0 and m["grad_norm"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_skip_can_be_turned_off_and_changes_what_is_trained(base_config):
    model = _tiny_llama()
    m = _trainer(base_config, model, skip=False).train_on(_groups([[1, 1, 1, 1], [0, 1, 0, 1]]))
    assert m["trained_samples"] == 8


def _frozen_start(seed=0):
    return _tiny_llama(seed).requires_grad_(False).eval()


def test_grpo_kl_term_pulls_towards_the_reference_even_in_all_equal_groups(base_config):
    """With kl_coef > 0 all-equal groups are trained on (the KL term has a gradient there)."""
    base_config["algorithm"].update({"loss": "grpo", "kl_coef": 0.5})
    model, reference = _tiny_llama(seed=1), _frozen_start(seed=0)  # the policy has drifted
    before = [p.detach().clone() for p in model.parameters()]
    m = _trainer(base_config, model, skip=True, reference=reference).train_on(_groups([[1, 1, 1, 1], [0, 0, 0, 0]]))
    assert m["trained_samples"] == 8 and m["kl_ref"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # ...and towards it: the KL to the reference falls over a few steps on the same data.
    trainer = _trainer(base_config, model, skip=True, reference=reference)
    kls = [trainer.train_on(_groups([[1, 1, 1, 1], [0, 0, 0, 0]]))["kl_ref"] for _ in range(5)]
    assert kls[-1] < kls[0], kls


def test_grpo_kl_is_zero_at_the_reference(base_config):
    base_config["algorithm"].update({"loss": "grpo", "kl_coef": 0.5})
    m = _trainer(base_config, _tiny_llama(), skip=True, reference=_frozen_start()).train_on(_groups(MIXED))
    assert m["kl_ref"] == pytest.approx(0.0, abs=1e-6)


def test_kl_without_a_reference_model_is_refused(base_config):
    base_config["algorithm"].update({"loss": "grpo", "kl_coef": 0.5})
    with pytest.raises(ValueError, match="reference model"):
        _trainer(base_config, _tiny_llama(), skip=True, reference=None)


class _RecordingSender:
    """Stands in for a WeightSender: records when the optimizer waits for its sends."""

    def __init__(self, copy: bool):
        self.copy, self.waits = copy, 0

    def guard(self, optimizer):
        def wait(*_):
            self.waits += 1

        return optimizer.register_step_pre_hook(wait)


@pytest.mark.parametrize("copy_out", [False, True])
def test_update_waits_for_sends_that_read_the_parameters(base_config, copy_out):
    # copy=False sends from the parameters themselves: optimizer.step() must wait for them
    sender = _RecordingSender(copy_out)
    trainer = make_trainer(base_config, _tiny_llama(), sender=sender)
    trainer.train_on(_groups([[1, 0, 1, 0]]))
    assert sender.waits == (0 if copy_out else 1)


def _nan_groups():
    groups = _groups(MIXED)
    groups[0].logprobs[0][0] = np.nan  # a behaviour log-prob a broken engine returned
    return groups


@pytest.mark.parametrize("how", ["nan logprob", "injected nan loss"])
def test_a_non_finite_step_is_not_applied_and_counted(base_config, monkeypatch, capsys, how):
    if how == "injected nan loss":
        monkeypatch.setenv("MPIRL_INJECT_FAULT", "nan-loss:0")
    model = _tiny_llama()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = _trainer(base_config, model, skip=True)
    m = trainer.train_on(_nan_groups() if how == "nan logprob" else _groups(MIXED))
    assert m["nonfinite_skipped"] == 1.0 and not np.isfinite(m["loss"])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing applied
    assert not trainer.optimizer.state  # not even Adam's moments moved
    assert all(p.grad is None for p in model.parameters())  # the bad gradient is gone
    assert "step 0: the loss (nan)" in capsys.readouterr().out
    # The next, finite step trains as usual.
    monkeypatch.delenv("MPIRL_INJECT_FAULT", raising=False)
    m = trainer.train_on(_groups(MIXED, seed=1))
    assert m["nonfinite_skipped"] == 0.0 and np.isfinite(m["loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_non_finite_step_stops_the_run_when_asked(base_config):
    base_config["algorithm"]["on_nonfinite"] = "stop"
    model = _tiny_llama()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(FloatingPointError, match=r"step 0: .*not finite; algorithm.on_nonfinite is stop"):
        _trainer(base_config, model, skip=True).train_on(_nan_groups())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
