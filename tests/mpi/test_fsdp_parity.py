"""Two FSDP2 trainers follow the one-trainer loss curve on a fixed seed.

    mpirun -n 4 --oversubscribe .venv/bin/python -m pytest --with-mpi tests/mpi/test_fsdp_parity.py

Ranks 0-1 shard the policy with FSDP2 (gloo) and each trains on half of every batch; rank 2
trains the same model unsharded on the whole batch; rank 3 only takes part in the set-up. Same
init, same data, a few AdamW steps: losses and final weights agree within float tolerance.
"""

import traceback

import pytest
import torch

pytestmark = [pytest.mark.mpi(min_size=3), pytest.mark.timeout(120)]

TRAINERS, REFERENCE = (0, 1), 2
STEPS, BATCH, SEQ = 5, 4, 16


def tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=37, hidden_size=24, intermediate_size=45, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


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

    from roles.sharding import full_state, shard_model
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
            losses = train(model, [x[i * half:(i + 1) * half] for x in data], group)
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
            torch.testing.assert_close(state[k], v, rtol=1e-4, atol=1e-5, msg=lambda m: f"{k}: {m}")
    assert ref_losses[-1] < ref_losses[0]  # it did learn something
