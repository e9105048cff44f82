"""Loss aggregations against their formulas; micro-batches that add up to the whole batch."""

import pytest
import torch

from roles.algorithm.aggregation import Aggregate, step_units
from roles.algorithm.losses import grpo_loss

pytestmark = pytest.mark.timeout(60)

# Row 0: 3 tokens, row 1: 1 token, row 2: none (a zero-length response).
X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [7.0, 7.0, 7.0]])
MASK = torch.tensor([[True, True, True], [True, False, False], [False, False, False]])


@pytest.mark.parametrize(
    ("mode", "want"),
    [
        ("token_mean", (1 + 2 + 3 + 4) / 4),
        ("seq_mean_token_sum", ((1 + 2 + 3) + 4) / 2),  # the empty row is not a sequence
        ("seq_mean_token_mean", ((1 + 2 + 3) / 3 + 4 / 1) / 2),
        ("constant", ((1 + 2 + 3) + 4) / (2 * 8)),  # Dr. GRPO with a length of 8
    ],
)
def test_each_aggregation_is_its_formula(mode, want):
    agg = Aggregate(MASK, mode, constant=8)
    assert agg(X).item() == pytest.approx(want)
    assert float(agg.units) == step_units(mode, tokens=4, sequences=2, constant=8)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant"])
def test_micro_batches_weighted_by_their_units_add_up_to_the_batch(mode):
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, 0.0, 0.0], [-0.7, -0.2, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, False, False], [True, True, False]])
    old, adv = logp.detach() - 0.1, torch.tensor([1.0, -2.0, 0.5])
    full, _ = grpo_loss(logp, old, adv, mask, agg=Aggregate(mask, mode, constant=5))
    total = float(Aggregate(mask, mode, constant=5).units)
    parts = 0.0
    for rows in (slice(0, 2), slice(2, 3)):
        agg = Aggregate(mask[rows], mode, constant=5)
        loss, _ = grpo_loss(logp[rows], old[rows], adv[rows], mask[rows], agg=agg)
        parts = parts + loss * float(agg.units) / total
    assert parts.item() == pytest.approx(full.item(), rel=1e-6)


def test_a_masked_token_keeps_its_sequence_in_the_count():
    keep = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    agg = Aggregate(MASK, "seq_mean_token_sum").keeping(keep)
    assert agg(X).item() == pytest.approx((1 + 3) / 2)


def test_bad_modes_are_refused():
    with pytest.raises(ValueError, match="loss_agg"):
        Aggregate(MASK, "sum")
    with pytest.raises(ValueError, match="constant"):
        Aggregate(MASK, "constant")
