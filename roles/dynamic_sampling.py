"""Dynamic sampling (DAPO) under asynchrony: which scored groups a step drops, and how many
spares the controller keeps in flight so that the trainer does not wait for refills.

A group whose samples all scored the same has a group advantage of 0: it costs a trainer its
forward and backward passes and teaches nothing. With ``rollout.dynamic_sampling`` training
groups are handed out without a step (``roles.partial_rollouts.SlotBook``); each is scored,
and its reward rank asks the controller for its slot, saying whether it is all-equal. This
rule answers the all-equal ones: dropped (the example is used up, as in DAPO), unless the
first open step has already dropped ``max_refill_rounds x prompts_per_step`` of them, in which
case it is kept (trained with advantage 0) so that no step waits for refills without end.

The drop rate is measured over the last groups judged; the controller keeps
``open_slots x d / (1 - d)`` spares in flight beyond the open slots (at most ``max_spares x
prompts_per_step``), so that when a step's groups are dropped their replacements are already
sampled. It knows nothing of messages or steps' data: ``SlotBook`` asks it.
"""

from __future__ import annotations

import collections
import math

# Before any group is judged the rate is this prior, worth this many groups: a few spares
# from the first step on, forgotten as soon as real groups are judged.
_PRIOR_RATE, _PRIOR_GROUPS = 0.25, 4
_MAX_RATE = 0.9  # spares stay bounded (and max_spares caps them) even if nearly all groups drop


def all_equal(rewards) -> bool:
    """Whether every sample of a group scored the same (its group advantage is 0)."""
    return len(set(float(r) for r in rewards)) <= 1


class DropRule:
    def __init__(self, config, prompts_per_step: int):
        """``config``: the role map's ``rollout.dynamic_sampling``."""
        self.budget = config.max_refill_rounds * prompts_per_step  # drops per step, at most
        self.max_spares = math.ceil(config.max_spares * prompts_per_step)
        self.recent: collections.deque[bool] = collections.deque(maxlen=max(4 * prompts_per_step, 32))
        self.dropped_in: collections.Counter = collections.Counter()  # step -> groups it dropped

    def drops(self, step: int, equal: bool) -> bool:
        """Whether the first open step ``step`` drops a group just scored (``equal``: all-equal)."""
        drop = equal and self.dropped_in[step] < self.budget
        self.recent.append(drop)
        if drop:
            self.dropped_in[step] += 1
        return drop

    def bound_reached(self, step: int) -> bool:
        return self.dropped_in[step] >= self.budget

    def rate(self) -> float:
        """The share of scored groups dropped lately."""
        return (sum(self.recent) + _PRIOR_RATE * _PRIOR_GROUPS) / (len(self.recent) + _PRIOR_GROUPS)

    def spares(self, open_slots: int) -> int:
        """Groups to keep in flight beyond ``open_slots`` so that enough survive the drops."""
        d = min(self.rate(), _MAX_RATE)
        return min(self.max_spares, math.ceil(open_slots * d / (1 - d)))

    def forget_before(self, step: int) -> None:
        for s in [s for s in self.dropped_in if s < step]:
            del self.dropped_in[s]
