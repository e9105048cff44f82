import math

import pytest
import torch

from roles.algorithm.losses import aipo_loss, grpo_loss


def _batch():
    # Row 0: three tokens; row 1: two tokens then one padding slot.
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, 0.0]], requires_grad=True)
    # log ratios: log 0.5 (kept below 1), log 3 (above rho=2: clipped), 0, log 1.5, 0; pad garbage
    log_ratio = torch.tensor([[math.log(0.5), math.log(3.0), 0.0], [math.log(1.5), 0.0, 50.0]])
    old_logp = logp.detach() - log_ratio
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    return logp, old_logp, adv, mask


def test_aipo_value_and_clip_from_above_only():
    logp, old, adv, mask = _batch()
    loss, m = aipo_loss(logp, old, adv, mask, rho=2.0)
    w = [0.5, 2.0, 1.0, 1.5, 1.0]  # min(ratio, 2): 0.5 stays, 3 -> 2
    a = [1.0, 1.0, 1.0, -2.0, -2.0]
    lp = [-1.0, -2.0, -0.5, -0.3, -1.5]
    want = -sum(wi * ai * li for wi, ai, li in zip(w, a, lp)) / 5
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert m["clip_frac"].item() == pytest.approx(1 / 5)
    assert m["ratio_mean"].item() == pytest.approx((0.5 + 3 + 1 + 1.5 + 1) / 5, rel=1e-6)
    assert m["ratio_max"].item() == pytest.approx(3.0, rel=1e-6)
    assert int(m["n_tokens"]) == 5


def test_aipo_weight_carries_no_gradient():
    logp, old, adv, mask = _batch()
    loss, _ = aipo_loss(logp, old, adv, mask, rho=2.0)
    loss.backward()
    # d loss / d logp_t = -weight_t * A_t / n_tokens; padding gets exactly 0.
    want = -torch.tensor([[0.5 * 1, 2.0 * 1, 1.0 * 1], [1.5 * -2, 1.0 * -2, 0.0]]) / 5
    torch.testing.assert_close(logp.grad, want, rtol=1e-6, atol=1e-7)


def test_aipo_token_average_over_batch_not_per_sequence():
    logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-3.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([1.0, 1.0])
    loss, _ = aipo_loss(logp, logp, adv, mask)  # on-policy: all weights 1
    assert loss.item() == pytest.approx(7 / 5)  # (4*1 + 3) / 5 tokens; per-sequence mean gives 2.0


def test_aipo_padding_garbage_does_not_leak():
    logp, old, adv, mask = _batch()
    old = old.clone()
    old[1, 2] = float("nan")
    lp2 = logp.detach().clone()
    lp2[1, 2] = float("inf")
    loss, m = aipo_loss(lp2.requires_grad_(), old, adv, mask, rho=2.0)
    assert torch.isfinite(loss) and torch.isfinite(m["ratio_max"])


def test_aipo_per_token_advantages():
    logp, old, _, mask = _batch()
    adv_tok = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 99.0]])
    a, _ = aipo_loss(logp, old, adv_tok, mask, rho=2.0)
    b, _ = aipo_loss(logp, old, torch.tensor([1.0, -2.0]), mask, rho=2.0)
    assert a.item() == pytest.approx(b.item())


def test_grpo_clipping_and_gradient():
    logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0]], requires_grad=True)
    # ratios 0.5 (A<0: clipped, no grad), 1.5 (A>0: clipped, no grad), 1.1 (inside), 0.5 with A>0
    # (below 1-eps but A>0: min picks the unclipped r*A, gradient flows)
    ratios = torch.tensor([[0.5, 1.5, 1.1, 0.5]])
    old = logp.detach() - ratios.log()
    adv = torch.tensor([[-1.0, 2.0, 3.0, 1.0]])
    mask = torch.ones_like(logp, dtype=torch.bool)
    loss, m = grpo_loss(logp, old, adv, mask, clip_eps=0.2)
    surr = [0.8 * -1.0, 1.2 * 2.0, 1.1 * 3.0, 0.5 * 1.0]
    assert loss.item() == pytest.approx(-sum(surr) / 4, rel=1e-6)
    assert m["clip_frac"].item() == pytest.approx(2 / 4)
    loss.backward()
    # d/dlogp of -r*A/n = -r*A/n where unclipped
    want = torch.tensor([[0.0, 0.0, -1.1 * 3.0 / 4, -0.5 * 1.0 / 4]])
    torch.testing.assert_close(logp.grad, want, rtol=1e-5, atol=1e-7)


def test_grpo_k3_kl():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0]])
    adv = torch.zeros(1)
    mask = torch.ones_like(logp, dtype=torch.bool)
    loss, m = grpo_loss(logp, logp.detach(), adv, mask, kl_coef=0.1, ref_logp=ref)
    d = -0.5
    k3 = (math.exp(d) - d - 1) / 2  # second token: ref == logp, k3 = 0
    assert m["kl_ref"].item() == pytest.approx(k3, rel=1e-6)
    assert loss.item() == pytest.approx(0.1 * k3, rel=1e-5)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, logp.detach(), adv, mask, kl_coef=0.1)


@pytest.mark.parametrize("loss_fn", [aipo_loss, grpo_loss])
def test_micro_batches_with_num_tokens_sum_to_the_full_batch(loss_fn):
    logp, old, adv, mask = _batch()
    full, _ = loss_fn(logp, old, adv, mask)
    parts = [loss_fn(logp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], num_tokens=5)[0] for i in (0, 1)]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), rel=1e-6)


def test_numpy_inputs_from_messages_are_accepted():
    logp, old, adv, mask = _batch()
    a, _ = aipo_loss(logp, old.numpy(), adv.numpy(), mask.numpy(), rho=2.0)
    b, _ = aipo_loss(logp, old, adv, mask, rho=2.0)
    assert a.item() == pytest.approx(b.item())
