"""Weight sync from trainer shards to generators is bit-identical (4 ranks: 2 trainers, 2 generators).

    mpirun -n 4 --oversubscribe .venv/bin/python -m pytest --with-mpi tests/mpi/test_weight_sync.py

Ranks 0-1 are trainers, 2-3 generators. Every test runs on every rank; a failure on one rank
is shared with the others at the end of the test (nobody is left waiting), and every wait is
bounded by the process-group timeout, so a broken sync fails instead of hanging.
"""

import time
import traceback
from types import SimpleNamespace

import pytest
import torch

from support.tiny_models import tiny_llama as support_tiny_llama

pytestmark = [pytest.mark.mpi(min_size=4), pytest.mark.timeout(120)]

TRAINERS, GENERATORS = (0, 1), (2, 3)


@pytest.fixture(scope="module")
def world():
    from mpi4py import MPI

    from transports.torch_dist import init_torch_distributed, new_group

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    init_torch_distributed(comm, timeout_s=60)
    # new_group is collective over the whole world: every rank creates both, in this order.
    trainers = new_group(TRAINERS)
    weights = new_group(TRAINERS + GENERATORS)
    return SimpleNamespace(comm=comm, rank=comm.Get_rank(), trainers=trainers, weights=weights)


def tiny_llama(dtype, seed=0):
    # Odd sizes on purpose: vocab 37 and MLP width 45 do not split evenly over 2 trainers.
    return support_tiny_llama(seed).to(dtype)


def run_everywhere(world, fn):
    """Run ``fn`` on this rank; raise on every rank if it failed on any."""
    err = None
    try:
        fn()
    except Exception:
        err = f"rank {world.rank}:\n{traceback.format_exc()}"
    errors = [e for e in world.comm.allgather(err) if e]
    if errors:
        pytest.fail("\n".join(errors))


def bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def check_generator(world, got, expected, boxes=None):
    """``got`` (from finish()) equals ``expected`` (trainer 0's full weights) bit for bit."""
    got = dict(got)
    assert list(got) == list(expected)
    for name, want in expected.items():
        if boxes is not None:
            want = want[tuple(slice(a, b) for a, b in boxes[name])]
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        assert torch.equal(bits(got[name]), bits(want)), f"{name} differs"


def receive(receiver, version):
    """What a generator does: post, keep 'generating' while polling, swap at a batch boundary."""
    receiver.start(version)
    deadline = time.monotonic() + 60
    while not receiver.ready():
        assert time.monotonic() < deadline, "weights did not arrive within 60 s"
        time.sleep(0.002)  # one decode step
    out = receiver.finish()
    s = receiver.stats
    assert s.version == version and s.nbytes > 0 and s.transfer_s > 0
    assert s.stall_s < 1.0, f"finish() after ready() should not stall, took {s.stall_s:.3f}s"
    return out


def on_the_wire(weights: dict, generator_dtype) -> dict:
    """What a generator that holds ``generator_dtype`` receives: each tensor cast to it when it
    is narrower, else the trainers' own (it casts up itself as it loads)."""
    if generator_dtype is None:
        return weights
    return {k: v.to(generator_dtype) if generator_dtype.itemsize < v.dtype.itemsize else v for k, v in weights.items()}


@pytest.mark.parametrize("generator_dtype", [None, torch.bfloat16], ids=["same-dtype", "bf16-generators"])
def test_one_trainer_two_generators(world, generator_dtype):
    """Milestone 1: trainer rank 0 holds the whole (unsharded) model; rank 1 stands by."""
    from roles.policy.sharding import local_shards
    from transports.weights import Need, WeightReceiver, WeightSender, make_weight_transport
    from transports.weights.plan import dtype_name

    def body():
        rank = world.rank
        model = tiny_llama(torch.float32) if rank == 0 else None
        shards = local_shards(model) if rank == 0 else None
        wanted = None if generator_dtype is None else dtype_name(generator_dtype)
        need = Need(dtype=wanted) if rank in GENERATORS else None
        ep = make_weight_transport(
            "torch", world.comm, shards=shards, need=need, group=world.weights, bucket_bytes=8192, pack_below=2048
        )
        assert (ep is None) == (rank == 1)
        for version in (1, 2):
            if rank == 0:
                assert isinstance(ep, WeightSender)
                expected = {k: v.detach().clone() for k, v in model.named_parameters()}
                ep.push(local_shards(model), version)
                with torch.no_grad():  # training goes on at once: the push took a snapshot
                    for p in model.parameters():
                        p.mul_(0.5).add_(0.25)
                for g in GENERATORS:
                    world.comm.send(expected, dest=g, tag=11)
                ep.wait()
            elif rank in GENERATORS:
                assert isinstance(ep, WeightReceiver)
                got = receive(ep, version)
                expected = world.comm.recv(source=0, tag=11)
                check_generator(world, got, on_the_wire(expected, generator_dtype))
                itemsize = 4 if generator_dtype is None else 2
                assert ep.stats.nbytes == sum(t.numel() for t in expected.values()) * itemsize

    run_everywhere(world, body)


@pytest.mark.parametrize(
    "kind,dtype,copy,generator_dtype",
    [
        ("torch", torch.float32, True, None),
        ("torch", torch.bfloat16, False, None),
        ("mpi", torch.float32, False, None),
        ("mpi", torch.bfloat16, True, None),
        ("torch", torch.float32, False, torch.bfloat16),
        ("mpi", torch.float32, True, torch.bfloat16),
        ("mpi", torch.bfloat16, False, torch.float32),
    ],
    ids=[
        "torch-fp32-copy",
        "torch-bf16-nocopy",
        "mpi-fp32-nocopy",
        "mpi-bf16-copy",
        "torch-fp32-to-bf16-nocopy",
        "mpi-fp32-to-bf16-copy",
        "mpi-bf16-to-fp32-nocopy",
    ],
)
def test_two_fsdp_trainers_two_generators(world, kind, dtype, copy, generator_dtype):
    """FSDP2 shards on ranks 0-1 go straight to generators 2-3, across optimizer steps.

    copy=False sends from the parameters' memory; guard() makes optimizer.step() wait for it.
    A generator of a narrower dtype gets the trainers' weights cast to it, bit for bit.
    """
    from roles.policy.sharding import full_state, local_shards, shard_model
    from transports.weights import Need, make_weight_transport
    from transports.weights.plan import dtype_name

    def body():
        rank = world.rank
        is_trainer = rank in TRAINERS
        model = opt = None
        if is_trainer:
            model = shard_model(tiny_llama(dtype), world.trainers)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            rows = {s.name: s.tensor.shape[0] for s in local_shards(model)}
            assert rows["model.embed_tokens.weight"] == (19 if rank == 0 else 18)
        ep = make_weight_transport(
            kind,
            world.comm,
            shards=local_shards(model) if is_trainer else None,
            need=None if is_trainer else Need(dtype=generator_dtype and dtype_name(generator_dtype)),
            group=world.weights,
            bucket_bytes=4096,
            pack_below=1024,
            copy=copy,
        )
        if is_trainer and not copy:
            ep.guard(opt)
        data = torch.randint(0, 37, (4, 12), generator=torch.Generator().manual_seed(3))
        for version in (1, 2, 3):
            if is_trainer:
                if version > 1:  # one FSDP2 training step on this trainer's half of the batch
                    x = data[2 * rank : 2 * rank + 2]
                    model(x, labels=x).loss.backward()
                    opt.step()
                    opt.zero_grad()
                expected = full_state(model)  # collective over the trainers
                ep.push(local_shards(model), version)
                if rank == 0:
                    for g in GENERATORS:
                        world.comm.send(expected, dest=g, tag=12)
            else:
                got = receive(ep, version)
                check_generator(world, got, on_the_wire(world.comm.recv(source=0, tag=12), generator_dtype))
        if is_trainer:
            ep.wait()

    run_everywhere(world, body)


def test_tensor_parallel_generators(world):
    """Generators 2 and 3 are the two tensor-parallel ranks of one engine: each gets its slice."""
    from roles.models import spec_for, tp_need
    from roles.policy.sharding import full_state, local_shards, shard_model
    from transports.weights import make_weight_transport

    def body():
        rank = world.rank
        is_trainer = rank in TRAINERS
        model = shard_model(tiny_llama(torch.float32), world.trainers) if is_trainer else None
        need = None
        if not is_trainer:  # the split rules come from the model family, as data
            m = tiny_llama(torch.float32)
            need = tp_need(spec_for(m), m.named_parameters(), tp_rank=rank - 2, tp_size=2)
        ep = make_weight_transport(
            "torch",
            world.comm,
            shards=local_shards(model) if is_trainer else None,
            need=need,
            group=world.weights,
            bucket_bytes=2048,
            pack_below=512,
        )
        if is_trainer:
            expected = full_state(model)
            ep.push(local_shards(model), 1)
            if rank == 0:
                for g in GENERATORS:
                    world.comm.send(expected, dest=g, tag=13)
            ep.wait()
        else:
            got = receive(ep, 1)
            expected = world.comm.recv(source=0, tag=13)
            check_generator(world, got, expected, boxes=ep.plan.needs[rank])
            assert ep.plan.nbytes_to(rank) < sum(v.numel() * 4 for v in expected.values())

    run_everywhere(world, body)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_odd_shapes_without_fsdp(world, dtype):
    """Shards cut by hand: rows that do not divide by 2, a 1-row tensor, 3-d, tiny buckets."""
    from transports.weights import Need, make_weight_transport
    from transports.weights.plan import LocalShard, chunk_range

    shapes = [(7,), (5, 3), (1, 4), (3, 5, 2), (9, 1), (33, 17), (301, 5)]

    def body():
        rank = world.rank
        g = torch.Generator().manual_seed(5)
        full = {f"w{i}": torch.randn(s, generator=g).to(dtype) for i, s in enumerate(shapes)}
        shards = None
        if rank in TRAINERS:
            shards = []
            for k, v in full.items():
                a, b = chunk_range(v.shape[0], 2, rank)
                shards.append(LocalShard(k, v[a:b].clone(), tuple(v.shape), a))
        ep = make_weight_transport(
            "torch",
            world.comm,
            shards=shards,
            need=None if rank in TRAINERS else Need(),
            group=world.weights,
            bucket_bytes=64,
            pack_below=64,
        )
        if rank in TRAINERS:
            ep.push(shards, 1)
            ep.wait()
        else:
            check_generator(world, receive(ep, 1), full)

    run_everywhere(world, body)


def test_setup_errors_reach_every_rank(world):
    """MPI transport asked for CUDA buffers on a non-CUDA-aware MPI: every rank hears why."""
    from transports.weights import Need, make_weight_transport, mpi_cuda_aware
    from transports.weights.plan import LocalShard

    if mpi_cuda_aware():
        pytest.skip("this MPI is CUDA-aware")

    def body():
        rank = world.rank
        shards = [LocalShard("w", torch.ones(4, 2), (8, 2), 4 * rank)] if rank in TRAINERS else None
        with pytest.raises(RuntimeError, match="not CUDA-aware") as info:
            make_weight_transport(
                "mpi", world.comm, shards=shards, need=None if rank in TRAINERS else Need(), device="cuda"
            )
        assert "rank 2" in str(info.value) and "rank 3" in str(info.value)

    run_everywhere(world, body)
