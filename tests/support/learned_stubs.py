"""Learned rewards the scoring tests name as ``support.learned_stubs:<Name>``: no model, a
score each can be predicted from, and one way each misbehaves."""

from __future__ import annotations

from roles.rewards.learned.base import LearnedConfig, LearnedReward, RawScore


class LengthConfig(LearnedConfig):
    per_char: float = 1.0


class Length(LearnedReward):
    """Scores len(response) * per_char; says so in its note; fails (None) on an empty response."""

    Config = LengthConfig

    def score_raw(self, items):
        return [
            RawScore(len(i.response) * self.config.per_char, note=f"{len(i.response)} chars")
            if i.response
            else RawScore(None)
            for i in items
        ]


class Broken(LearnedReward):
    def score_raw(self, items):
        raise RuntimeError("the reward model's device fell over")


class ShortAnswer(LearnedReward):
    def score_raw(self, items):
        return [RawScore(1.0)]  # one score, whatever it was asked
