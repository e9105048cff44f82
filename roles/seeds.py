"""Sampling seeds of the protocol's units: a batch (by its id) and, streaming, a group (by its id)."""

from __future__ import annotations

import numpy as np

# Eval batches' seeds start here: above any training batch's of the same run seed.
_EVAL_SEED_BASE = 1 << 32


def batch_seed(run_seed: int, batch_id: int) -> int:
    """The sampling seed of a batch: distinct per batch, reproducible per run, never negative
    (an eval batch's id is: ``roles.protocol.eval_batch_id``)."""
    if batch_id < 0:
        return run_seed * 1_000_003 + _EVAL_SEED_BASE - batch_id
    return run_seed * 1_000_003 + batch_id


def group_seed(run_seed: int, group_id: int) -> int:
    """The sampling seed of one group (streaming): a hash of the run's seed and the group's id
    (eval groups' ids are negative and distinct too), reproducible whoever samples it."""
    state = np.random.SeedSequence([run_seed & (2**64 - 1), group_id & (2**64 - 1), 0x6E0]).generate_state(1, np.uint64)
    return int(state[0] >> 1)
