"""Verifiers and learned rewards added up into one weighted score per sample."""

from __future__ import annotations

import pytest

from roles.rewards.scoring import GroupToScore, build_scoring
from roles.sections.reward import RewardSection
from roles.tasks.base import Example

pytestmark = pytest.mark.timeout(120)


def _groups(*responses_per_group):
    return [
        GroupToScore(Example(id=i, prompt="q", answer="ab"), [{"role": "user", "content": "q"}], "q", list(rs))
        for i, rs in enumerate(responses_per_group)
    ]


def _scoring(components):
    return build_scoring(RewardSection.model_validate({"components": components}), context=None)


def test_learned_alone_needs_no_sandbox_and_keeps_groups_notes_and_failures():
    scoring = _scoring([{"name": "support.learned_stubs:Length", "label": "len", "weight": 2.0, "per_char": 0.5}])
    try:
        assert scoring.sandbox is None
        out = scoring.score(_groups(["ab", "abcd"], [""]))
        assert [[r.score for r in g] for g in out] == [[2.0, 4.0], [0.0]]
        first = out[0][0]
        assert first.components == {"len": 1.0, "correct": 1.0} and first.notes == {"len": "2 chars"}
        assert out[1][0].failures == 1 and out[1][0].components["correct"] == 0.0
    finally:
        scoring.close()


def test_with_verifiers_the_total_is_the_weighted_sum_and_correct_is_the_verifiers():
    scoring = _scoring(
        [
            {"name": "exact"},
            {"name": "support.learned_stubs:Length", "label": "len", "weight": -1.0, "normalize": "group"},
        ]
    )
    try:
        (group,) = scoring.score(_groups(["ab", "abcd"]))
        # exact: 1 then 0; len normalised within the group: -1 then +1, weighed -1.
        assert [r.score for r in group] == pytest.approx([2.0, -1.0])
        assert [r.components["correct"] for r in group] == [1.0, 0.0]
        assert group[0].components["len/raw"] == 2.0  # shaped, so the raw score is logged too
    finally:
        scoring.close()


@pytest.mark.parametrize("stub", ["Broken", "ShortAnswer"])
def test_a_learned_reward_that_fails_scores_zero_and_is_counted(stub):
    scoring = _scoring([{"name": "exact"}, {"name": f"support.learned_stubs:{stub}", "label": "bad"}])
    try:
        (group,) = scoring.score(_groups(["ab", "x"]))
        assert [r.score for r in group] == [1.0, 0.0]  # exact still counts
        assert all(r.failures == 1 and r.components["bad/failed"] == 1.0 for r in group)
    finally:
        scoring.close()
