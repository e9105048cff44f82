"""Two critic ranks sharing one value model (FSDP2, gloo) compute the values one unsharded copy
does, take the step it takes on the whole batch when each trains on its part (one with fewer
micro-batches than the other: filler passes), and their checkpoint loads onto one rank and one
rank's onto them (resharded), float32 within 1e-5.

    mpirun -n 3 --oversubscribe .venv/bin/python -m pytest --with-mpi tests/mpi/test_value_model_sharding.py

Ranks 0-1 are the critic ranks; rank 2 holds the unsharded reference.
"""

import tempfile
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.mpi(min_size=3), pytest.mark.timeout(120)]

SHARDS, REFERENCE = (0, 1), 2
ALPHABET = "0123456789+="
VOCAB = 3 + len(ALPHABET)
ROWS, MICRO_BATCH = 10, 2
SPLIT = 7  # rank 0 values and trains rows [0, 7) in 4 passes, rank 1 rows [7, 10) in 2


def batch(seed=0):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, VOCAB, int(rng.integers(1, 6))) for _ in range(ROWS)]
    responses = [rng.integers(3, VOCAB, int(rng.integers(1, 7))) for _ in range(ROWS)]
    returns = [rng.normal(size=len(r)).astype(np.float32) for r in responses]
    return prompts, responses, returns


def mine(rank, *columns):
    """This rank's part of each column (a critic rank's share; the reference: all of it)."""
    if rank == REFERENCE:
        return columns
    part = slice(0, SPLIT) if rank == SHARDS[0] else slice(SPLIT, ROWS)
    return tuple(c[part] for c in columns)


def setup():
    """(comm, rank, the critic ranks' group, a tiny Llama folder every rank sees)."""
    from mpi4py import MPI

    from examples.toy.tiny_llama import build_tiny_llama
    from transports.torch_dist import init_torch_distributed, new_group

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm, timeout_s=60)
    group = new_group(list(SHARDS))  # collective over the whole world
    folder = None
    if rank == 0:
        d = Path(tempfile.mkdtemp(prefix="value-sharding-"))
        folder = str(build_tiny_llama(d / "tiny", ALPHABET, hidden_size=64, num_layers=2, num_heads=1))
    return comm, rank, group, comm.bcast(folder, root=0)


def value_model(folder, group):
    from roles.value.model import load_value_model
    from roles.value.training import ValueModel

    return ValueModel(load_value_model(folder, torch.float32, group), group, lr=1e-3, micro_batch=MICRO_BATCH)


def gathered(comm, rank, result, err):
    """Every rank's (result, error); a failure anywhere fails the test on every rank."""
    everyone = comm.allgather((result, f"rank {rank}:\n{err}" if err else None))
    errors = [e for _, e in everyone if e]
    if errors:
        pytest.fail("\n".join(errors))
    return [r for r, _ in everyone]


def test_two_shards_value_and_train_as_one_model():
    comm, rank, group, folder = setup()
    prompts, responses, returns = batch()
    result, err = None, None
    try:
        if rank in SHARDS or rank == REFERENCE:
            vm = value_model(folder, group)
            p, r, ret = mine(rank, prompts, responses, returns)
            before = vm.values(p, r)
            metrics = vm.train_step(p, r, ret, before, clip=0.2)
            after = vm.values(prompts, responses)  # every row on every rank: all the same passes
            result = (before, metrics, after)
    except Exception:
        err = traceback.format_exc()
    results = gathered(comm, rank, result, err)
    want_before, want_metrics, want_after = results[REFERENCE]
    got_before = results[SHARDS[0]][0] + results[SHARDS[1]][0]
    assert [len(v) for v in got_before] == [len(r) for r in responses]
    for got, want in zip(got_before, want_before):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    for s in SHARDS:
        metrics, after = results[s][1], results[s][2]
        assert metrics["tokens"] == want_metrics["tokens"] == sum(len(r) for r in responses)
        for key in ("value_loss", "value_clip_frac", "value_mean", "grad_norm"):
            assert metrics[key] == pytest.approx(want_metrics[key], rel=1e-5, abs=1e-6), key
        assert metrics["nonfinite_skipped"] == 0.0
        for got, want in zip(after, want_after):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # The step moved the values (a test that ran no update would pass the comparison).
    assert max(float(np.abs(a - b).max()) for a, b in zip(want_after, want_before)) > 1e-4


def test_checkpoints_reshard_between_two_critic_ranks_and_one():
    comm, rank, group, folder = setup()
    prompts, responses, returns = batch(seed=1)
    root = comm.bcast(tempfile.mkdtemp(prefix="value-ckpt-") if rank == 0 else None, root=0)
    two, one, export = f"{root}/two", f"{root}/one", f"{root}/export"
    result, err = None, None
    try:
        # Each side takes a step and saves (the pair into ``two``, the reference into ``one``).
        vm = value_model(folder, group)
        p, r, ret = mine(rank, prompts, responses, returns)
        if rank in SHARDS or rank == REFERENCE:
            vm.train_step(p, r, ret, vm.values(p, r), clip=0.2)
            vm.save(two if rank in SHARDS else one)
            saved = vm.values(prompts, responses)
        if rank in SHARDS:
            vm.export(export, tokenizer_dir=folder)
        comm.Barrier()  # both checkpoints and the export are complete
        # Then each loads the other's, onto a fresh model: 2 shards -> 1 rank, 1 rank -> 2 shards.
        if rank in SHARDS or rank == REFERENCE:
            fresh = value_model(folder, group)
            fresh.load(one if rank in SHARDS else two)
            loaded = fresh.values(prompts, responses)
            # The optimizer's moments came along: one more step is the other side's step.
            fresh.train_step(p, r, ret, fresh.values(p, r), clip=0.2)
            stepped = fresh.values(prompts, responses)
            exported = value_model(export, None).values(prompts, responses) if rank == REFERENCE else None
            result = (saved, loaded, stepped, exported)
    except Exception:
        err = traceback.format_exc()
    results = gathered(comm, rank, result, err)
    pair_saved, ref_saved = results[SHARDS[0]][0], results[REFERENCE][0]
    for s in SHARDS:
        _, loaded, stepped, _ = results[s]
        for got, want in zip(loaded, ref_saved):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    _, ref_loaded, ref_stepped, exported = results[REFERENCE]
    for got, want, exp in zip(ref_loaded, pair_saved, exported):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        np.testing.assert_allclose(exp, want, rtol=0, atol=1e-5)
    for s in SHARDS:
        for got, want in zip(results[s][2], ref_stepped):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
