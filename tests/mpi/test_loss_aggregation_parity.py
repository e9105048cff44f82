"""Two FSDP2 trainers make one trainer's update under every loss aggregation (``algorithm.loss_agg``).

    mpirun -n 4 --oversubscribe .venv/bin/python -m pytest --with-mpi tests/mpi/test_loss_aggregation_parity.py

Ranks 0-1 each train on half of a step's groups (their responses of different lengths, so the
ranks hold different token and sequence counts); rank 2 trains one unsharded copy on all of
them. Whatever the aggregation divides by (tokens, sequences, a constant), the step must be
the same: the sharded weights equal the reference's within float tolerance.
"""

import traceback

import numpy as np
import pytest
import torch

from support.tiny_models import tiny_llama
from support.trainers import make_trainer, random_group

pytestmark = [pytest.mark.mpi(min_size=3), pytest.mark.timeout(180)]

TRAINERS, REFERENCE = (0, 1), 2


def _groups(seed: int, lengths: list[list[int]]):
    rng = np.random.default_rng(seed)
    return [
        random_group(rng, i, lens, [float(k % 2) for k in range(len(lens))], vocab=37) for i, lens in enumerate(lengths)
    ]


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant"])
def test_two_sharded_trainers_make_the_one_trainer_update(base_config, loss_agg):
    from mpi4py import MPI

    from roles.policy.sharding import full_state, shard_model
    from transports.torch_dist import init_torch_distributed, new_group

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm, timeout_s=60)
    group = new_group(TRAINERS)
    # Unequal shares: rank 0 holds short responses, rank 1 long ones.
    share = {0: _groups(0, [[1, 2, 3, 2], [2, 1, 1, 3]]), 1: _groups(1, [[6, 9, 7, 8], [9, 5, 8, 6]])}

    def trainer(model, n_trainers, dp_group):
        rollout = {"prompts_per_step": 4, "samples_per_prompt": 4, "max_new_tokens": 12}
        return make_trainer(
            base_config, model, rank=rank, dp_group=dp_group,
            sections={"world": {"trainer": n_trainers}, "rollout": rollout},
            loss="grpo", loss_agg=loss_agg, micro_batch=3, lr=1e-2,
        )  # fmt: skip

    result, err = None, None
    try:
        if rank in TRAINERS:
            model = shard_model(tiny_llama(), group)
            trainer(model, 2, group).train_on(share[rank])
            result = full_state(model)
        elif rank == REFERENCE:
            model = tiny_llama()
            trainer(model, 1, None).train_on(share[0] + share[1])
            result = {k: v.detach().clone() for k, v in model.named_parameters()}
    except Exception:
        err = f"rank {rank}:\n{traceback.format_exc()}"
    everyone = comm.allgather((result, err))
    errors = [e for _, e in everyone if e]
    if errors:
        pytest.fail("\n".join(errors))
    ref = everyone[REFERENCE][0]
    init = dict(tiny_llama().named_parameters())
    assert any(not torch.equal(init[k], v) for k, v in ref.items())  # the step moved the weights
    for t in TRAINERS:
        for k, v in ref.items():
            torch.testing.assert_close(everyone[t][0][k], v, rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")
