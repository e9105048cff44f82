"""DAPO's soft over-length punishment (``reward.overlong``): a reward shaping term by response length.

``penalty(L) = 0`` for ``L <= L_max - L_cache``, ``((L_max - L_cache) - L) / L_cache`` for
``L_max - L_cache < L <= L_max`` (a ramp from 0 to -1), and ``-1`` past ``L_max``. The reward
rank adds ``weight x penalty`` to each training sample's score, as the ``overlong`` component;
evaluation is scored without it. It knows nothing of the role map: the reward rank resolves
``max_length`` (``rollout.max_new_tokens`` when not set).
"""

from __future__ import annotations


def overlong_penalty(length: int, max_length: int, buffer: int) -> float:
    """The penalty in [-1, 0] of a response ``length`` tokens long."""
    if buffer <= 0 or buffer > max_length:
        raise ValueError(f"the over-length buffer ({buffer}) must be in [1, max_length ({max_length})]")
    start = max_length - buffer
    if length <= start:
        return 0.0
    if length > max_length:
        return -1.0
    return (start - length) / buffer
