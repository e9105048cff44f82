"""The critic's message to the controller (``roles.critic``)."""

from __future__ import annotations

from dataclasses import field

from transports.codec import message


@message
class CriticDone:
    """Critic rank 0 -> controller: the value model's update on step ``step`` is done; its
    figures (value loss, explained variance, ...), the same on every critic rank."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)
