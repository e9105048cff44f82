"""Two reward ranks sharing one reward model sharded between them (FSDP2, gloo) score as one
unsharded copy does, float32 within 1e-5, even when one rank has nothing to score in a call
or fewer micro-batches than the other.

    mpirun -n 4 --oversubscribe .venv/bin/python -m pytest --with-mpi tests/mpi/test_sharded_reward_model.py
"""

import tempfile
import traceback
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.mpi(min_size=3), pytest.mark.timeout(120)]

SHARDS, REFERENCE = (0, 1), 2


def test_two_shards_score_as_one_model():
    from mpi4py import MPI

    from examples.arith.tokens import ALPHABET
    from examples.toy.tiny_llama import save_char_tokenizer
    from roles.rewards.learned.base import ScorerContext
    from roles.rewards.learned.reward_model import RewardModel
    from support.reward_models import parity_items, save_reward_model
    from transports.torch_dist import init_torch_distributed, new_group

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm, timeout_s=60)
    group = new_group(list(SHARDS))  # collective over the whole world
    folder = None
    if rank == 0:
        d = Path(tempfile.mkdtemp(prefix="sharded-rm-"))
        folder = str(save_reward_model(d / "rm", save_char_tokenizer(d / "tok", ALPHABET), hidden=64, layers=3))
    folder = comm.bcast(folder, root=0)
    items = [item for item, _ in parity_items(20, seed=5)]
    # Per call, what each shard scores: rank 1 has nothing in the first call, and in the second
    # fewer micro-batches than rank 0 (a budget of 16 tokens: about two rows a pass).
    calls = {0: [items[:5], items[5:15]], 1: [[], items[15:]]}
    result, err = None, None
    try:
        if rank in SHARDS:
            cfg = RewardModel.Config(path=folder, shard=True, tokens_per_batch=16)
            rm = RewardModel(cfg, ScorerContext(rank_index=SHARDS.index(rank), ranks=2, group=group))
            assert rm.collective
            result = [[r.value for r in rm.score_raw(call)] for call in calls[rank]]
        elif rank == REFERENCE:
            rm = RewardModel(RewardModel.Config(path=folder), ScorerContext())
            result = [r.value for r in rm.score_raw(items)]
    except Exception:
        err = f"rank {rank}:\n{traceback.format_exc()}"
    everyone = comm.allgather((result, err))
    errors = [e for _, e in everyone if e]
    if errors:
        pytest.fail("\n".join(errors))
    want = everyone[REFERENCE][0]
    got0, got1 = everyone[0][0], everyone[1][0]
    assert got0[0] + got0[1] == pytest.approx(want[:15], abs=1e-5)
    assert got1[0] == [] and got1[1] == pytest.approx(want[15:], abs=1e-5)
