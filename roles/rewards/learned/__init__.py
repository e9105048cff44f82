"""Learned rewards: scorers that run a model (or ask a server) for a whole batch of responses.

Unlike verifiers, which score one ``(response, example)`` at a time in sandbox worker
processes, these run inside the reward rank itself: they hold a model on the rank's device
(``reward_model``, ``judge``) or a connection pool (``remote``), and score every group that
has arrived in one call, in micro-batches. ``base`` is their interface and the options they
share (normalisation, scale, clipping); ``conversation`` re-renders a prompt and response with
the scorer's own tokenizer and chat template.

They are named in the role map like any reward (``reward: {name: model, path: ...}``) and
may be weighed with verifiers in ``components``: ``roles.rewards.scoring`` adds them up.
"""

from __future__ import annotations

# Built-in learned scorers, by the name a role map gives them (lazy ``module:Class`` paths).
LEARNED: dict[str, str] = {
    "model": "roles.rewards.learned.reward_model:RewardModel",
    "judge": "roles.rewards.learned.judge:Judge",
    "http": "roles.rewards.learned.remote:RemoteReward",
}


def is_learned(name: str) -> bool:
    """Whether the reward called ``name`` is a batch scorer run in the rank (not a verifier)."""
    from roles.rewards import reward_object
    from roles.rewards.learned.base import LearnedReward

    obj = reward_object(name)
    return isinstance(obj, type) and issubclass(obj, LearnedReward)
