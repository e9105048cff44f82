import math

import numpy as np
import pytest
import torch

from roles.algorithm.gae import gae, gae_batch, value_loss, whiten

pytestmark = pytest.mark.timeout(60)


def reference_gae(values, reward, gamma, lam, token_rewards=None):
    """The definition, term by term: a double loop over t and k, in Python floats."""
    T = len(values)
    r = [float(token_rewards[t]) if token_rewards is not None else 0.0 for t in range(T)]
    if T:
        r[T - 1] += reward
    v = [float(x) for x in values] + [0.0]
    delta = [r[t] + gamma * v[t + 1] - v[t] for t in range(T)]
    adv = []
    for t in range(T):
        total = 0.0
        for k in range(T - t):
            total += (gamma * lam) ** k * delta[t + k]
        adv.append(total)
    return adv, [adv[t] + v[t] for t in range(T)]


def test_gamma_one_lam_one_returns_are_the_final_reward():
    values = np.array([0.3, -1.2, 2.0, 0.7], dtype=np.float32)
    adv, ret = gae(values, 1.5, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(ret, np.full(4, 1.5), rtol=1e-6)
    np.testing.assert_allclose(adv, 1.5 - values, rtol=1e-6)


def test_lam_one_returns_are_discounted_monte_carlo_and_ignore_values():
    rng = np.random.default_rng(0)
    tr = rng.normal(size=6).astype(np.float32)
    gamma = 0.9
    rewards = tr.astype(np.float64)
    rewards[-1] += 2.0
    want = [sum(gamma**k * rewards[t + k] for k in range(6 - t)) for t in range(6)]
    for values in (np.zeros(6), rng.normal(size=6)):
        _, ret = gae(values.astype(np.float32), 2.0, gamma, 1.0, token_rewards=tr)
        np.testing.assert_allclose(ret, want, rtol=1e-6, atol=1e-6)


def test_lam_zero_is_one_step_td():
    values = np.array([0.5, -0.25, 1.0], dtype=np.float32)
    tr = np.array([-0.1, -0.2, -0.3], dtype=np.float32)
    gamma = 0.8
    adv, ret = gae(values, 2.0, gamma, lam=0.0, token_rewards=tr)
    v_next = [-0.25, 1.0, 0.0]
    r = [-0.1, -0.2, -0.3 + 2.0]
    want = [r[t] + gamma * v_next[t] - float(values[t]) for t in range(3)]
    np.testing.assert_allclose(adv, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ret, np.array(want) + values, rtol=1e-6, atol=1e-7)


def test_reward_only_at_last_token():
    values = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    adv, _ = gae(values, 4.0, gamma=0.5, lam=0.5)
    # deltas: 0 + .5*2 - 1 = 0, 0 + .5*3 - 2 = -0.5, 4 + 0 - 3 = 1; gamma * lam = 0.25
    np.testing.assert_allclose(adv, [0 + 0.25 * -0.5 + 0.0625 * 1, -0.5 + 0.25 * 1, 1.0], rtol=1e-6)
    np.testing.assert_allclose(adv, reference_gae(values, 4.0, 0.5, 0.5)[0], rtol=1e-6)


@pytest.mark.parametrize("T", [1, 2, 5, 17, 64, 300])
def test_random_cases_match_the_reference(T):
    rng = np.random.default_rng(T)
    for gamma, lam in [(1.0, 1.0), (0.0, 0.5), (1.0, 0.0)] + [tuple(rng.uniform(size=2)) for _ in range(4)]:
        values = rng.normal(size=T).astype(np.float32)
        tr = (-rng.uniform(size=T) * 0.1).astype(np.float32)
        reward = float(rng.normal())
        for token_rewards in (None, tr):
            adv, ret = gae(values, reward, gamma, lam, token_rewards=token_rewards)
            want_adv, want_ret = reference_gae(values, reward, gamma, lam, token_rewards)
            assert adv.dtype == np.float32 and ret.dtype == np.float32 and adv.shape == (T,)
            np.testing.assert_allclose(adv, want_adv, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(ret, want_ret, rtol=1e-6, atol=1e-6)


def test_empty_response_gives_empty_arrays():
    adv, ret = gae(np.zeros(0, dtype=np.float32), 1.0, 0.9, 0.9)
    assert adv.shape == (0,) and ret.shape == (0,) and adv.dtype == np.float32


def test_batch_of_different_lengths_including_one_and_zero():
    rng = np.random.default_rng(1)
    lengths = [4, 1, 0, 7]
    values = [rng.normal(size=n).astype(np.float32) for n in lengths]
    tr = [rng.normal(size=n).astype(np.float32) for n in lengths]
    tr[1] = None
    rewards = [1.0, -1.0, 0.5, 2.0]
    advs, rets = gae_batch(values, rewards, 0.95, 0.9, tr)
    assert [a.shape[0] for a in advs] == lengths and [r.shape[0] for r in rets] == lengths
    for i in range(4):
        want_adv, want_ret = reference_gae(values[i], rewards[i], 0.95, 0.9, tr[i])
        np.testing.assert_allclose(advs[i], want_adv, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(rets[i], want_ret, rtol=1e-6, atol=1e-6)
    # T = 1: A = r - V_0 and the return is the reward itself
    assert rets[1][0] == pytest.approx(-1.0) and advs[1][0] == pytest.approx(-1.0 - values[1][0])


@pytest.mark.parametrize("name, kwargs", [("gamma", dict(gamma=1.5, lam=0.9)), ("gamma", dict(gamma=math.nan, lam=0.9)),
                                          ("lam", dict(gamma=0.9, lam=-0.1))])  # fmt: skip
def test_gamma_or_lam_outside_unit_interval_is_refused(name, kwargs):
    with pytest.raises(ValueError, match=name):
        gae(np.zeros(3), 1.0, **kwargs)
    with pytest.raises(ValueError, match=name):
        gae_batch([np.zeros(3)], [1.0], **kwargs)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="values"):
        gae(np.zeros((2, 3)), 1.0, 0.9, 0.9)
    with pytest.raises(ValueError, match="token_rewards"):
        gae(np.zeros(3), 1.0, 0.9, 0.9, token_rewards=np.zeros(4))
    with pytest.raises(ValueError, match="rewards"):
        gae_batch([np.zeros(3), np.zeros(2)], [1.0], 0.9, 0.9)
    with pytest.raises(ValueError, match="token_rewards_list"):
        gae_batch([np.zeros(3)], [1.0], 0.9, 0.9, token_rewards_list=[None, None])


def test_whiten_over_all_tokens_of_the_batch():
    rng = np.random.default_rng(2)
    advs = [rng.normal(3.0, 2.0, size=n).astype(np.float32) for n in (5, 1, 0, 9)]
    out = whiten(advs)
    assert [o.shape for o in out] == [a.shape for a in advs]
    flat = np.concatenate(out)
    assert abs(flat.mean()) < 1e-6 and flat.std() == pytest.approx(1.0, rel=1e-5)
    # one shift and scale for the whole batch, not one per response
    src = np.concatenate(advs).astype(np.float64)
    np.testing.assert_allclose(flat, (src - src.mean()) / src.std(), rtol=1e-5, atol=1e-6)
    assert np.all(whiten([np.full(4, 2.0)])[0] == 0)


# --- value loss ---------------------------------------------------------------------------------


def _hand_case():
    # old = 0, R = 1, clip = 0.2 for all three tokens:
    #   V = 0.5: moved 0.5 toward R; clipped V = 0.2, (0.2-1)^2 = 0.64 > (0.5-1)^2 = 0.25: clip binds
    #   V = -0.5: moved away from R; clipped (-0.2-1)^2 = 1.44 < (-1.5)^2 = 2.25: unclipped term wins
    #   V = 0.1: inside the clip; both terms (0.1-1)^2 = 0.81
    values = torch.tensor([0.5, -0.5, 0.1], requires_grad=True)
    return values, torch.zeros(3), torch.ones(3), torch.ones(3, dtype=torch.bool)


def test_value_loss_clipping_on_a_hand_case():
    values, old, ret, mask = _hand_case()
    loss, m = value_loss(values, old, ret, mask, clip=0.2)
    assert loss.item() == pytest.approx(0.5 * (0.64 + 2.25 + 0.81) / 3, rel=1e-6)
    assert m["value_clip_frac"].item() == pytest.approx(1 / 3)
    assert m["value_mean"].item() == pytest.approx(0.1 / 3, rel=1e-5)
    assert m["return_mean"].item() == pytest.approx(1.0)
    assert int(m["n_tokens"]) == 3
    assert all(not t.requires_grad and t.dim() == 0 for t in m.values())


def test_value_loss_gradient_is_zero_where_the_clip_binds():
    values, old, ret, mask = _hand_case()
    loss, _ = value_loss(values, old, ret, mask, clip=0.2)
    loss.backward()
    # d/dV 0.5 (V - R)^2 / n = (V - R) / n where the unclipped term wins; 0 where the clip binds
    torch.testing.assert_close(values.grad, torch.tensor([0.0, -1.5, -0.9]) / 3)


@pytest.mark.parametrize("clip", [None, 0.0])
def test_value_loss_unclipped(clip):
    values, old, ret, mask = _hand_case()
    loss, m = value_loss(values, old, ret, mask, clip=clip)
    assert loss.item() == pytest.approx(0.5 * (0.25 + 2.25 + 0.81) / 3, rel=1e-6)
    assert m["value_clip_frac"].item() == 0.0


def test_value_loss_refuses_bad_clip_and_shapes():
    values, old, ret, mask = _hand_case()
    with pytest.raises(ValueError, match="clip"):
        value_loss(values, old, ret, mask, clip=-0.1)
    with pytest.raises(ValueError, match="returns"):
        value_loss(values, old, torch.ones(4), mask)


def _padded(rows, width, fill):
    out = torch.full((len(rows), width), fill)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row)
    return out


def test_value_loss_padded_equals_unpadded_and_nan_padding_does_not_leak():
    rng = np.random.default_rng(3)
    lengths = [4, 1, 0, 6]
    values_l = [rng.normal(size=n).astype(np.float32) for n in lengths]
    old_l = [(v + rng.normal(size=v.shape) * 0.5).astype(np.float32) for v in values_l]
    _, returns_l = gae_batch(old_l, [1.0, -1.0, 0.0, 2.0], 0.99, 0.95)
    flat = {k: torch.as_tensor(np.concatenate(x)) for k, x in dict(v=values_l, o=old_l, r=returns_l).items()}
    want, want_m = value_loss(flat["v"], flat["o"], flat["r"], torch.ones(11, dtype=torch.bool), clip=0.2)

    values = _padded(values_l, 6, math.nan).requires_grad_()
    mask = _padded([[True] * n for n in lengths], 6, False).to(torch.bool)
    loss, m = value_loss(values, _padded(old_l, 6, math.inf), _padded(returns_l, 6, math.nan), mask, clip=0.2)
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    for k in want_m:
        assert m[k].item() == pytest.approx(want_m[k].item(), rel=1e-5, abs=1e-7), k
    loss.backward()
    assert torch.isfinite(values.grad).all() and (values.grad[~mask] == 0).all()


def test_value_loss_num_tokens_makes_shards_add_up_to_the_whole():
    torch.manual_seed(0)
    v, o, r = torch.randn(3, 4, 5).unbind(0)
    mask = torch.rand(4, 5) > 0.3
    whole, _ = value_loss(v, o, r, mask)
    n = int(mask.sum())
    parts = [value_loss(v[s], o[s], r[s], mask[s], num_tokens=n)[0] for s in (slice(0, 1), slice(1, 4))]
    assert (parts[0] + parts[1]).item() == pytest.approx(whole.item(), rel=1e-6)


def test_explained_variance():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mask = torch.ones(4, dtype=torch.bool)
    assert value_loss(r.clone(), r, r, mask)[1]["explained_variance"].item() == pytest.approx(1.0)
    assert value_loss(torch.zeros(4), r, r, mask)[1]["explained_variance"].item() == pytest.approx(0.0, abs=1e-6)
    # residuals [0.5, -0.5, 0.5, -0.5]: Var 0.25 against Var(R) = 1.25
    v = r - torch.tensor([0.5, -0.5, 0.5, -0.5])
    assert value_loss(v, r, r, mask)[1]["explained_variance"].item() == pytest.approx(1 - 0.25 / 1.25, rel=1e-6)


def test_value_loss_falls_when_optimised_toward_the_returns():
    torch.manual_seed(1)
    returns = torch.randn(2, 8)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 5:] = False
    param = torch.zeros(2, 8, requires_grad=True)
    opt = torch.optim.SGD([param], lr=5.0)
    losses = []
    for _ in range(20):
        old = param.detach().clone()  # PPO-style: each update starts from the values it sampled with
        for _ in range(2):
            loss, _ = value_loss(param, old, returns, mask, clip=0.2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]
    assert all(b <= a + 1e-7 for a, b in zip(losses, losses[1:]))
