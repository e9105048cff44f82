"""Two FSDP2 trainers follow the one-trainer loss curve on a fixed seed.

    mpirun -n 4 --oversubscribe .venv/bin/python -m pytest --with-mpi tests/mpi/test_fsdp_parity.py

Ranks 0-1 shard the policy with FSDP2 (gloo) and each trains on half of every batch; rank 2
trains the same model unsharded on the whole batch; rank 3 only takes part in the set-up. Same
init, same data, a few AdamW steps: losses and final weights agree within float tolerance.
"""

import traceback

import pytest
import torch

from support.tiny_models import tiny_llama
from support.trainers import make_trainer, random_group

pytestmark = [pytest.mark.mpi(min_size=3), pytest.mark.timeout(120)]

TRAINERS, REFERENCE = (0, 1), 2
STEPS, BATCH, SEQ = 5, 4, 16


def train(model, batches, group=None):
    """AdamW steps; returns the loss of each step averaged over the group (the global batch)."""
    import torch.distributed as dist

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses = []
    for x in batches:
        loss = model(x, labels=x).loss  # mean over this rank's tokens (equal count on each rank)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if group is not None:
            loss = loss.detach().clone()
            dist.all_reduce(loss, group=group)
            loss /= dist.get_world_size(group)
        losses.append(float(loss))
    return losses


def test_two_trainers_match_one():
    from mpi4py import MPI

    from roles.policy.sharding import full_state, shard_model
    from transports.torch_dist import init_torch_distributed, new_group

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm, timeout_s=60)
    group = new_group(TRAINERS)  # collective over the whole world

    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 37, (BATCH, SEQ), generator=g) for _ in range(STEPS)]
    result, err = None, None
    try:
        if rank in TRAINERS:
            model = shard_model(tiny_llama(), group)
            half = BATCH // len(TRAINERS)
            i = TRAINERS.index(rank)
            losses = train(model, [x[i * half : (i + 1) * half] for x in data], group)
            result = (losses, full_state(model))
        elif rank == REFERENCE:
            model = tiny_llama()
            losses = train(model, data)
            result = (losses, {k: v.detach().clone() for k, v in model.named_parameters()})
    except Exception:
        err = f"rank {rank}:\n{traceback.format_exc()}"
    everyone = comm.allgather((result, err))
    errors = [e for _, e in everyone if e]
    if errors:
        pytest.fail("\n".join(errors))

    ref_losses, ref_state = everyone[REFERENCE][0]
    for t in TRAINERS:
        losses, state = everyone[t][0]
        assert losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6), (t, losses, ref_losses)
        assert list(state) == list(ref_state)
        for k, v in ref_state.items():
            torch.testing.assert_close(state[k], v, rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")
    assert ref_losses[-1] < ref_losses[0]  # it did learn something


@pytest.mark.parametrize("layout", ["fsdp", "replicas"])
def test_trainers_skip_all_equal_groups_without_losing_step(base_config, layout):
    """Two trainers where one rank's groups all scored the same: that rank trains on nothing,
    yet must join every collective (FSDP's, or the replicas' gradient all-reduce, and the
    metrics' all-reduce), and the update must be the one a single trainer makes on all the
    groups without skipping. ``replicas`` is the colocated mode's layout."""
    import numpy as np
    from mpi4py import MPI

    from roles.policy.sharding import full_state, shard_model
    from transports.torch_dist import init_torch_distributed, new_group

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm, timeout_s=60)
    group = new_group(TRAINERS)

    rng = np.random.default_rng(0)

    def groups(rewards_per_group):
        return [random_group(rng, i, rng.integers(1, 6, len(r)), r, vocab=37) for i, r in enumerate(rewards_per_group)]

    # Trainer 0's share has three groups with signal (two micro-batches of 4 samples each);
    # trainer 1's share is all-equal. The reference trains on both shares at once.
    share = {
        0: groups([[1, 0, 1, 0], [0, 1, 1, 1], [1, 1, 0, 1]]),
        1: groups([[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]),
    }

    def trainer(model, skip, n_trainers, dp_group, replicas=False, micro_batch=4):
        return make_trainer(
            base_config, model, rank=rank, dp_group=dp_group, replicas=replicas,
            sections={"world": {"trainer": n_trainers}, "rollout": {"prompts_per_step": 6}},
            skip_zero_advantage=skip, micro_batch=micro_batch, lr=1e-2,
        )  # fmt: skip

    result, err = None, None
    try:
        if rank in TRAINERS:
            replicas = layout == "replicas"
            model = tiny_llama() if replicas else shard_model(tiny_llama(), group)
            actor = trainer(model, True, 2, group, replicas)
            local = actor.train_on(share[rank])
            m = actor.trainers.reduce_metrics(local)
            state = {k: v.detach().clone() for k, v in model.named_parameters()} if replicas else full_state(model)
            result = (m["trained_samples"], state, local, m)
        elif rank == REFERENCE:
            model = tiny_llama()
            m = trainer(model, False, 1, None).train_on(share[0] + share[1])
            # What the step's figures must be: the trained groups (trainer 0's share) in one
            # micro-batch, so each maximum is taken over every token at once.
            alone = trainer(tiny_llama(), True, 1, None, micro_batch=12).train_on(share[0])
            result = (m["trained_samples"], {k: v.detach().clone() for k, v in model.named_parameters()}, alone)
    except Exception:
        err = f"rank {rank}:\n{traceback.format_exc()}"
    everyone = comm.allgather((result, err))
    errors = [e for _, e in everyone if e]
    if errors:
        pytest.fail("\n".join(errors))

    ref_trained, ref_state, alone = everyone[REFERENCE][0]
    assert ref_trained == 24 and [everyone[t][0][0] for t in TRAINERS] == [12, 12]  # summed
    # The step's ratio and KL figures are those of the tokens trained on, wherever they were
    # (trainer 1 trained on nothing: an average over the two trainers halved them).
    local, reduced = [everyone[t][0][2] for t in TRAINERS], everyone[TRAINERS[0]][0][3]
    for key in ("ratio_mean", "ratio_max", "clip_frac", "kl_mu_pi", "logp_mismatch_mean", "logp_mismatch_max"):
        assert reduced[key] == pytest.approx(alone[key], rel=1e-5), key
    assert reduced["ratio_max"] >= reduced["ratio_mean"] > 0
    assert reduced["trained_tokens"] == alone["trained_tokens"] > 0
    # The loss is the token mean over every sample of the step (skipped ones count 0).
    tokens = [m["tokens"] for m in local]
    assert reduced["loss"] == pytest.approx(sum(m["loss"] * n for m, n in zip(local, tokens)) / sum(tokens))
    init = dict(tiny_llama().named_parameters())
    assert any(not torch.equal(init[k], v) for k, v in ref_state.items())
    for t in TRAINERS:
        state = everyone[t][0][1]
        for k, v in ref_state.items():
            torch.testing.assert_close(state[k], v, rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")
