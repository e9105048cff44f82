"""Clip-higher, decoupled PPO, the mismatch corrections, KL estimators and the entropy bonus
against plain reference formulas (Python floats, token by token) on small tensors."""

import math
from types import SimpleNamespace

import pytest
import torch

from roles.algorithm.corrections import mismatch_correction
from roles.algorithm.kl import kl_terms
from roles.algorithm.losses import aipo_loss, decoupled_loss, grpo_loss, policy_loss
from roles.algorithm.proximal import loglinear_alpha, proximal_logp

pytestmark = pytest.mark.timeout(60)


def _config(**over):
    base = dict(
        loss="aipo", rho=4.0, clip_eps=0.2, clip_eps_high=None, proximal="recompute", decoupled_cap=None,
        correction="none", correction_cap=2.0, correction_low=0.5, correction_high=2.0, loss_agg="token_mean",
        loss_agg_constant=None, kl_coef=0.0, kl_estimator="k3", entropy_coef=0.0, kl_in_loss=False,
    )  # fmt: skip
    base.update(over)
    return SimpleNamespace(**base)


def _ratios(ratios, adv):
    """One row whose tokens have the given ratios pi/mu (exactly, in float32) and advantages."""
    logp = torch.full((1, len(ratios)), -1.0, requires_grad=True)
    log_r = torch.tensor([ratios], dtype=torch.float32).log()
    old = logp.detach() - log_r
    return logp, old, torch.tensor([adv]), torch.ones(1, len(ratios), dtype=torch.bool)


def _ppo_reference(r, a, lo, hi):
    return min(r * a, min(max(r, 1 - lo), 1 + hi) * a)


def test_clip_higher_keeps_the_ratio_in_the_asymmetric_range():
    r = [0.7, 0.85, 1.25, 1.35, 1.1]
    a = [-1.0, -1.0, 2.0, 2.0, 1.0]
    logp, old, adv, mask = _ratios(r, a)
    loss, m = grpo_loss(logp, old, adv, mask, clip_eps=0.2, clip_eps_high=0.28)
    actual = torch.exp(logp.detach() - old)[0].tolist()  # the float32 ratios the loss sees
    want = -sum(_ppo_reference(ri, ai, 0.2, 0.28) for ri, ai in zip(actual, a)) / 5
    assert loss.item() == pytest.approx(want, rel=1e-6)
    # clipped: 0.7 (A<0, below 0.8) and 1.35 (A>0, above 1.28); 1.25 would be clipped at eps 0.2
    assert m["clip_frac"].item() == pytest.approx(2 / 5)
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 3] == 0
    assert logp.grad[0, 2] == pytest.approx(-actual[2] * 2.0 / 5, rel=1e-5)


@pytest.mark.parametrize("side", ["low", "high"])
def test_a_ratio_exactly_at_the_clip_bound_keeps_its_gradient(side):
    # The bound is taken from the float32 ratio itself, so the ratio sits on it exactly.
    logp = torch.tensor([[-1.0]], requires_grad=True)
    d = -0.25 if side == "low" else 0.25
    old = logp.detach() - d
    r = float(torch.exp(logp.detach() - old))
    adv = torch.tensor([-1.0 if side == "low" else 1.0])
    eps = 1 - r if side == "low" else r - 1
    loss, m = grpo_loss(logp, old, adv, torch.ones(1, 1, dtype=torch.bool), clip_eps=0.2 if side == "high" else eps,
                        clip_eps_high=eps if side == "high" else 0.2)  # fmt: skip
    assert loss.item() == pytest.approx(-r * float(adv), rel=1e-6)
    assert m["clip_frac"].item() == 0.0  # on the bound is inside the range
    loss.backward()
    assert logp.grad.item() == pytest.approx(-r * float(adv), rel=1e-5)  # d(-rA)/dlogp = -rA


def test_decoupled_value_and_gradient_against_the_formula():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mu = torch.tensor([[-1.5, -1.0, -0.5]])
    prox = torch.tensor([[-1.2, -2.5, -0.1]])
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    loss, m = decoupled_loss(logp, mu, adv, mask, prox, clip_eps=0.2, clip_eps_high=0.3, cap=1.5)
    want, grads = 0.0, []
    for lp, u, p, a in zip([-1.0, -2.0, -0.5], [-1.5, -1.0, -0.5], [-1.2, -2.5, -0.1], [1.0, -1.0, 2.0]):
        r, w = math.exp(lp - p), min(math.exp(p - u), 1.5)
        want -= _ppo_reference(r, a, 0.2, 0.3) * w / 3
        unclipped = r * a <= min(max(r, 0.8), 1.3) * a
        grads.append(-r * a * w / 3 if unclipped else 0.0)
    assert loss.item() == pytest.approx(want, rel=1e-6)
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([grads]), rtol=1e-5, atol=1e-7)
    # w: exp(0.3) (1.35, kept), exp(-1.5), exp(0.4) (1.49, kept): none truncated at 1.5
    assert m["behave_truncated_frac"].item() == 0.0
    _, m = decoupled_loss(logp, mu, adv, mask, prox, cap=1.2)
    assert m["behave_truncated_frac"].item() == pytest.approx(2 / 3)


def test_decoupled_with_recompute_has_aipos_gradient_with_rho_at_the_cap():
    """One update per step: pi_prox is pi itself, r = 1, and the gradient is w A grad log pi."""
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, 0.0]], requires_grad=True)
    mu = logp.detach() - torch.tensor([[math.log(0.5), math.log(3.0), 0.0], [math.log(1.5), 0.0, 0.0]])
    adv, mask = torch.tensor([1.0, -2.0]), torch.tensor([[True, True, True], [True, True, False]])
    loss, _ = decoupled_loss(logp, mu, adv, mask, proximal_logp("recompute", logp, mu), cap=2.0)
    loss.backward()
    g_dec = logp.grad.clone()
    logp.grad = None
    aipo, _ = aipo_loss(logp, mu, adv, mask, rho=2.0)
    aipo.backward()
    torch.testing.assert_close(g_dec, logp.grad, rtol=1e-6, atol=1e-7)


def test_loglinear_proximal_interpolates_by_staleness():
    assert loglinear_alpha(torch.tensor([0, 1, 3])).tolist() == pytest.approx([0.0, 0.5, 0.75])
    logp = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]], requires_grad=True)
    mu = torch.tensor([[-3.0, -3.0], [-1.0, -1.0]])
    prox = proximal_logp("loglinear", logp, mu, torch.tensor([0, 1]))
    # fresh (s=0): mu itself; one version behind (alpha 1/2): the midpoint of mu and pi
    torch.testing.assert_close(prox, torch.tensor([[-3.0, -3.0], [-1.5, -1.5]]))
    assert not prox.requires_grad
    per_token = proximal_logp("loglinear", logp, mu, torch.tensor([[0, 3], [1, 0]]))
    torch.testing.assert_close(per_token, torch.tensor([[-3.0, -3.0 + 0.75 * 2], [-1.5, -1.0]]))
    with pytest.raises(ValueError, match="staleness"):
        proximal_logp("loglinear", logp, mu)


def test_tis_truncates_the_token_weight():
    logp = torch.tensor([[-1.0, -1.0, -1.0, 0.0]])
    mu = logp - torch.tensor([[math.log(0.5), math.log(3.0), math.log(2.0), 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    w, keep, m = mismatch_correction("tis", logp, mu, mask, cap=2.0)
    assert keep is None
    assert w[0, :3].tolist() == pytest.approx([0.5, 2.0, 2.0], rel=1e-6)  # 2.0 exactly is not truncated
    assert m["correction_truncated_frac"].item() == pytest.approx(1 / 3)
    assert m["correction_masked_frac"].item() == 0.0


def test_icepop_masks_tokens_outside_the_band_and_seq_mask_whole_sequences():
    logp = torch.zeros(2, 3)
    q = torch.tensor([[0.4, 1.0, 2.5], [0.9, 1.1, 1.0]])
    mu = logp - q.log()
    mask = torch.tensor([[True, True, True], [True, True, False]])
    _, keep, m = mismatch_correction("icepop", logp, mu, mask, low=0.5, high=2.0)
    assert keep.tolist() == [[False, True, False], [True, True, True]]
    assert m["correction_masked_frac"].item() == pytest.approx(2 / 5)
    # row 0: geometric mean (0.4 * 2.5) ** (1/3) = 1: kept; row 1: (0.9 * 1.1) ** (1/2) ~ 0.995
    _, keep, m = mismatch_correction("seq_mask", logp, mu, mask, low=0.999, high=1.5)
    assert keep[:, 0].tolist() == [True, False]
    assert m["correction_masked_frac"].item() == pytest.approx(2 / 5)


def test_a_masked_token_leaves_the_loss_but_not_the_normaliser():
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    mu = logp.detach() - torch.tensor([[0.0, math.log(5.0)]])
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool)
    loss, m = policy_loss(_config(correction="icepop"), logp, mu, adv, mask)
    assert loss.item() == pytest.approx(-(1.0 * 1.0 * -1.0) / 2, rel=1e-6)  # token 0 only, over 2
    assert m["correction_masked_frac"].item() == pytest.approx(0.5)


def test_ppo_with_tis_is_decoupled_recompute_with_the_cap():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mu = logp.detach() - torch.tensor([[math.log(0.5), math.log(3.0), 0.1]])
    adv, mask = torch.tensor([[1.0, 2.0, -1.0]]), torch.ones(1, 3, dtype=torch.bool)
    a, m = policy_loss(_config(loss="grpo", correction="tis", correction_cap=2.0), logp, mu, adv, mask)
    b, _ = decoupled_loss(logp, mu, adv, mask, logp.detach(), cap=2.0)
    assert a.item() == pytest.approx(b.item(), rel=1e-7)
    assert m["correction_truncated_frac"].item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("loss", ["aipo", "grpo", "decoupled"])
@pytest.mark.parametrize("correction", ["none", "icepop", "seq_mask"])
def test_all_tokens_masked_and_zero_length_responses_give_a_zero_finite_loss(loss, correction):
    for T in (3, 0):
        logp = torch.zeros(2, T, requires_grad=True)
        mask = torch.zeros(2, T, dtype=torch.bool)
        out, m = policy_loss(_config(loss=loss, correction=correction), logp, logp.detach() - 0.3, torch.ones(2), mask)
        assert out.item() == 0.0 and all(torch.isfinite(v) for v in m.values())
        out.backward()
        assert logp.grad is None or not logp.grad.any()


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators(estimator):
    logp, ref = torch.tensor([[-1.0, -2.0, 0.0]]), torch.tensor([[-1.5, -1.0, 9.0]])
    mask = torch.tensor([[True, True, False]])
    terms = kl_terms(logp, ref, mask, estimator)
    want = []
    for lp, rf in ((-1.0, -1.5), (-2.0, -1.0)):
        d = rf - lp
        want.append({"k1": -d, "k2": d * d / 2, "k3": math.exp(d) - d - 1}[estimator])
    assert terms[0, :2].tolist() == pytest.approx(want, rel=1e-6)
    assert terms[0, 2] == 0  # padding: the reference there is garbage


def test_entropy_bonus_lowers_the_loss_by_its_token_mean():
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    entropy = torch.tensor([[0.5, 1.5]], requires_grad=True)
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool)
    base, _ = policy_loss(_config(), logp, logp.detach(), adv, mask)
    out, m = policy_loss(_config(entropy_coef=0.1), logp, logp.detach(), adv, mask, entropy=entropy)
    assert out.item() == pytest.approx(base.item() - 0.1 * 1.0, rel=1e-6)
    assert m["entropy_mean"].item() == pytest.approx(1.0)
    out.backward()
    assert entropy.grad[0].tolist() == pytest.approx([-0.05, -0.05])
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(_config(entropy_coef=0.1), logp, logp.detach(), adv, mask)
