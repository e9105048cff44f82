"""Trainer checkpoints round trip: FSDP2 shards from two trainers, one trainer, and 2 -> 1.

    mpirun -n 4 --oversubscribe .venv/bin/python -m pytest --with-mpi tests/mpi/test_checkpoint.py

Ranks 0-1 shard a tiny Llama with FSDP2 and take AdamW steps; they save with
``roles.checkpoint.trainer_state.save_trainer_state`` (each its own shards). Rank 2 trains the same model
unsharded and saves it alone (no_dist). Then fresh models load the checkpoints back: the two
trainers their own (parameters and optimizer state identical), rank 2 its own, and rank 3 the
two trainers' shards onto one unsharded model (resharding) — identical to the whole model;
and ranks 0-1 rank 2's whole checkpoint onto two shards (each reads its rows of every tensor).
"""

import traceback

import pytest
import torch

from support.tiny_models import tiny_llama

pytestmark = [pytest.mark.mpi(min_size=4), pytest.mark.timeout(180)]

TRAINERS, SINGLE, RESHARD = (0, 1), 2, 3


def adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def steps(model, opt, n=3):
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        x = torch.randint(0, 37, (2, 8), generator=g)
        model(x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()


def full_optim(model, opt) -> dict:
    """The optimizer's state by parameter name, every tensor whole (collective when sharded)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    sd = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    return {f"{name}.{k}": v.clone() for name, st in sd["state"].items() for k, v in st.items()}


def test_save_and_load_with_one_and_two_trainers_and_reshard(tmp_path_factory):
    from mpi4py import MPI

    from roles.checkpoint.trainer_state import load_trainer_state, save_trainer_state
    from roles.policy.sharding import full_state, shard_model
    from transports.torch_dist import init_torch_distributed, new_group

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm, timeout_s=60)
    group = new_group(TRAINERS)
    root = comm.bcast(str(tmp_path_factory.mktemp("ckpt")) if rank == 0 else None, root=0)
    sharded_dir, single_dir = f"{root}/sharded", f"{root}/single"

    err = None
    try:
        if rank in TRAINERS:
            model = shard_model(tiny_llama(), group)
            opt = adamw(model)
            steps(model, opt)
            save_trainer_state(sharded_dir, model, opt, group)
            want = (full_state(model), full_optim(model, opt))
            fresh = shard_model(tiny_llama(seed=5), group)
            fresh_opt = adamw(fresh)
            load_trainer_state(sharded_dir, fresh, fresh_opt, group)
            got = (full_state(fresh), full_optim(fresh, fresh_opt))
        elif rank == SINGLE:
            model = tiny_llama()
            opt = adamw(model)
            steps(model, opt)
            save_trainer_state(single_dir, model, opt, None)
            want = ({k: v.detach().clone() for k, v in model.named_parameters()}, full_optim(model, opt))
            fresh = tiny_llama(seed=5)
            fresh_opt = adamw(fresh)
            load_trainer_state(single_dir, fresh, fresh_opt, None)
            got = ({k: v.detach().clone() for k, v in fresh.named_parameters()}, full_optim(fresh, fresh_opt))
        comm.Barrier()  # the trainers' checkpoint is complete
        if rank in TRAINERS:
            for name, t in want[0].items():
                assert torch.equal(got[0][name], t), name
            assert want[1].keys() == got[1].keys()
            for key, t in want[1].items():
                assert torch.equal(got[1][key], t), key
        elif rank == SINGLE:
            for name, t in want[0].items():
                assert torch.equal(got[0][name], t), name
            for key, t in want[1].items():
                assert torch.equal(got[1][key], t), key
        # Two trainers' shards onto one unsharded model: what an uninterrupted FSDP2 pair held.
        reference = comm.bcast(({k: v.cpu() for k, v in want[0].items()}, want[1]) if rank == 0 else None, root=0)
        if rank == RESHARD:
            model = tiny_llama(seed=5)
            opt = adamw(model)
            load_trainer_state(sharded_dir, model, opt, None)
            for name, t in reference[0].items():
                assert torch.equal(dict(model.named_parameters())[name].detach(), t), name
            got_optim = full_optim(model, opt)
            for key, t in reference[1].items():
                assert torch.equal(got_optim[key], t), key
        # One trainer's whole tensors onto two FSDP2 shards: resharding the other way.
        single = comm.bcast(
            ({k: v.cpu() for k, v in want[0].items()}, want[1]) if rank == SINGLE else None, root=SINGLE
        )
        if rank in TRAINERS:
            model = shard_model(tiny_llama(seed=7), group)
            opt = adamw(model)
            load_trainer_state(single_dir, model, opt, group)
            got = (full_state(model), full_optim(model, opt))
            for name, t in single[0].items():
                assert torch.equal(got[0][name], t), name
            for key, t in single[1].items():
                assert torch.equal(got[1][key], t), key
    except Exception:
        err = f"rank {rank}:\n{traceback.format_exc()}"
    errors = [e for e in comm.allgather(err) if e]
    assert not errors, "\n".join(errors)
