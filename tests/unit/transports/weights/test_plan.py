"""The weight-sync transfer plan and both of its ends, in one process over a loopback channel."""

import math

import pytest
import torch

from roles.models import MODEL_SPECS, tp_need
from transports.weights import Need, WeightReceiver, WeightSender, build_plan, endpoints
from transports.weights.plan import ALIGN, LocalShard, ShardMeta, chunk_range


class Loopback:
    """An in-process Channel: one instance per rank, all sharing one wire."""

    def __init__(self, rank, wire, threaded_posts=False):
        self.rank, self.wire, self.threaded_posts = rank, wire, threaded_posts

    def isend(self, buf, dst, tag):
        key = (self.rank, dst, tag)
        assert key not in self.wire, f"two messages in flight with key {key}"
        self.wire[key] = buf.clone()
        return None

    def irecv(self, buf, src, tag):
        return [buf, (src, self.rank, tag)]

    def wait(self, h):
        assert self.test(h), "the loopback wire has no matching message: it would hang"

    def test(self, h):  # like MPI_Test: completing a receive delivers its data
        if h is None or h[0] is None:
            return True
        buf, key = h
        if key not in self.wire:
            return False
        data = self.wire.pop(key)
        assert data.numel() == buf.numel(), f"size mismatch on {key}"
        buf.copy_(data)
        h[0] = None
        return True

    def pollable(self, device):
        return True

    def posts_block(self, device):
        return self.threaded_posts

    def check_device(self, device):
        pass


def make_params(shapes, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {f"p{i}.weight": torch.randn(s, generator=g).to(dtype) for i, s in enumerate(shapes)}


def cut(params, n_trainers):
    """FSDP2-style dim-0 shards of full tensors, per trainer."""
    return [
        [
            LocalShard(
                k,
                v[slice(*chunk_range(v.shape[0], n_trainers, t))],
                tuple(v.shape),
                chunk_range(v.shape[0], n_trainers, t)[0],
            )
            for k, v in params.items()
        ]
        for t in range(n_trainers)
    ]


def sync(
    shards_per_trainer,
    needs,
    bucket_bytes,
    pack_below=1 << 20,
    mutate_after_push=False,
    threaded=False,
):
    """Trainers are ranks 0..T-1, generators T..; returns {gen rank: {name: tensor}} and the plan.

    ``threaded``: the senders post from their thread (as over gloo on CPU)."""
    T = len(shards_per_trainer)
    metas = {t: [ShardMeta.of(s) for s in sh] for t, sh in enumerate(shards_per_trainer)}
    gens = {T + i: n for i, n in enumerate(needs)}
    plan = build_plan(metas, gens, bucket_bytes=bucket_bytes, pack_below=pack_below)
    wire = {}
    senders = [WeightSender(plan, Loopback(t, wire, threaded_posts=threaded)) for t in range(T)]
    receivers = {g: WeightReceiver(plan, Loopback(g, wire)) for g in gens}
    for r in receivers.values():
        r.start(7)
    for t, s in enumerate(senders):
        s.push(shards_per_trainer[t], 7)
        if threaded:
            s.wait()  # the posting thread is done: everything is on the wire
        if mutate_after_push:
            for sh in shards_per_trainer[t]:
                sh.tensor.add_(1)
    out = {}
    for g, r in receivers.items():
        assert r.ready()
        out[g] = {k: v.clone() for k, v in r.finish()}
        assert r.stats.version == 7 and r.stats.nbytes == plan.nbytes_to(g)
    for s in senders:
        s.wait()
    assert not wire, "messages sent but never received"
    return out, plan


def bits(t):
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


ODD = [(7,), (5, 3), (1, 4), (3, 5, 2), (9, 1), (33, 17), (2,)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n_trainers", [1, 2, 3])
@pytest.mark.parametrize("bucket_bytes,pack_below", [(64, 64), (256, 100), (4096, 512), (1 << 20, 1 << 20)])
def test_full_weights_bit_identical(dtype, n_trainers, bucket_bytes, pack_below):
    params = make_params(ODD, dtype)
    out, plan = sync(cut(params, n_trainers), [Need(), Need()], bucket_bytes, pack_below)
    for g, got in out.items():
        assert list(got) == list(params)
        for k, v in params.items():
            assert got[k].dtype == dtype and torch.equal(bits(got[k]), bits(v)), (g, k)


def test_snapshot_at_push():
    """Training may change the parameters as soon as push() returns."""
    params = make_params(ODD, torch.float32)
    shards = cut({k: v.clone() for k, v in params.items()}, 2)
    out, _ = sync(shards, [Need()], bucket_bytes=128, pack_below=64, mutate_after_push=True)
    for k, v in params.items():
        assert torch.equal(out[2][k], v)


@pytest.mark.parametrize("n_trainers", [1, 2])
def test_tensor_parallel_slices(n_trainers):
    shapes = {
        "model.embed_tokens.weight": (37, 8),
        "model.layers.0.self_attn.q_proj.weight": (8, 8),
        "model.layers.0.self_attn.o_proj.weight": (8, 8),
        "model.layers.0.mlp.down_proj.weight": (8, 12),
        "model.layers.0.mlp.up_proj.weight": (12, 8),
        "model.norm.weight": (8,),
        "lm_head.weight": (37, 8),
    }
    g = torch.Generator().manual_seed(1)
    params = {k: torch.randn(s, generator=g) for k, s in shapes.items()}
    llama = MODEL_SPECS["llama"]
    needs = [tp_need(llama, shapes.items(), 0, 2), tp_need(llama, shapes.items(), 1, 2), Need()]
    out, plan = sync(cut(params, n_trainers), needs, bucket_bytes=96, pack_below=64)
    for i, need in enumerate(needs):
        for k, v in params.items():
            box = need.box(k, tuple(v.shape))
            want = v[tuple(slice(a, b) for a, b in box)]
            assert torch.equal(out[n_trainers + i][k], want), (i, k)
    # Row-parallel slices are split on dim 1, column-parallel on dim 0, norms replicated.
    assert needs[1].box("model.layers.0.mlp.down_proj.weight", (8, 12)) == ((0, 8), (6, 12))
    assert needs[1].box("model.embed_tokens.weight", (37, 8)) == ((19, 37), (0, 8))
    assert needs[1].box("model.norm.weight", (8,)) == ((0, 8),)


def test_bucket_bounds_and_order():
    params = make_params([(300, 7), (5,), (40, 3), (1, 1000)], torch.float32)
    bucket = 1024
    _, plan = sync(cut(params, 2), [Need(), Need()], bucket_bytes=bucket, pack_below=256)
    for t in plan.trainers:
        msgs = plan.sends(t)
        assert [m.tag for m in msgs] == list(range(len(msgs)))
        for m in msgs:
            rows = {pc.box[0][1] - pc.box[0][0] for pc in m.pieces}
            assert m.nbytes <= bucket or (len(m.pieces) == 1 and rows == {1}), m
            ends = sorted((pc.offset, pc.offset + pc.nbytes) for pc in m.pieces)
            assert all(a % ALIGN == 0 for a, _ in ends)
            assert all(b1 <= a2 for (_, b1), (a2, _) in zip(ends, ends[1:]))
            assert m.dsts == tuple(plan.generators)  # full weights: every message goes to both
    # The receiver interleaves trainers: (tag, src) order.
    for g in plan.generators:
        keys = [(m.tag, m.src) for m in plan.recvs(g)]
        assert keys == sorted(keys)
    # Bytes on the wire = the model once per generator.
    total = sum(v.numel() * v.element_size() for v in params.values())
    assert sum(plan.nbytes_from(t) for t in plan.trainers) == 2 * total
    assert all(plan.nbytes_to(g) == total for g in plan.generators)


def test_plan_is_deterministic():
    params = make_params(ODD, torch.float32)
    metas = {t: [ShardMeta.of(s) for s in sh] for t, sh in enumerate(cut(params, 2))}
    a = build_plan(metas, {5: Need(), 4: Need()}, bucket_bytes=256, pack_below=128)
    b = build_plan(dict(reversed(list(metas.items()))), {4: Need(), 5: Need()}, bucket_bytes=256, pack_below=128)
    assert a.buckets == b.buckets and a.generators == (4, 5)


def test_replicated_rows_are_split_between_trainers():
    params = make_params([(10, 4)], torch.float32)
    both = [[LocalShard(k, v, tuple(v.shape), 0) for k, v in params.items()] for _ in range(2)]
    out, plan = sync(both, [Need()], bucket_bytes=1 << 20)
    assert torch.equal(out[2]["p0.weight"], params["p0.weight"])
    assert [m.pieces[0].box[0] for m in plan.buckets] == [(0, 5), (5, 10)]


def test_layout_errors():
    params = make_params([(6, 2)], torch.float32)
    sh = cut(params, 2)
    metas = {0: [ShardMeta.of(sh[0][0])]}  # rows 3..6 held by nobody
    with pytest.raises(ValueError, match="held by no trainer"):
        build_plan(metas, {1: Need()})
    other = make_params([(6, 3)], torch.float32)
    metas = {0: [ShardMeta.of(sh[0][0])], 1: [ShardMeta.of(cut(other, 2)[1][0])]}
    with pytest.raises(ValueError, match="disagrees"):
        build_plan(metas, {2: Need()})
    with pytest.raises(ValueError, match="both trainer and generator"):
        build_plan({0: [ShardMeta.of(LocalShard("w", params["p0.weight"], (6, 2), 0))]}, {0: Need()})


def test_push_checks_shards_against_plan():
    params = make_params([(6, 2)], torch.float32)
    sh = cut(params, 2)
    plan = build_plan({t: [ShardMeta.of(s) for s in sh[t]] for t in range(2)}, {2: Need()})
    sender = WeightSender(plan, Loopback(0, {}))
    with pytest.raises(ValueError, match="the plan expects rows"):
        sender.push(sh[1], 0)  # trainer 1's rows pushed by trainer 0
    with pytest.raises(KeyError):
        sender.push([], 0)


def test_receiver_start_twice_is_an_error():
    params = make_params([(4, 2)], torch.float32)
    plan = build_plan({0: [ShardMeta.of(s) for s in cut(params, 1)[0]]}, {1: Need()})
    r = WeightReceiver(plan, Loopback(1, {}))
    r.start(1)
    with pytest.raises(RuntimeError, match="call finish"):
        r.start(2)


def test_big_piece_goes_straight_into_staging():
    """A piece of at least pack_below bytes is its own bucket; no packed buffer is needed."""
    params = make_params([(64, 64)], torch.float32)
    metas = {0: [ShardMeta.of(s) for s in cut(params, 1)[0]]}
    plan = build_plan(metas, {1: Need()}, bucket_bytes=4096, pack_below=1024)
    assert len(plan.buckets) == math.ceil(64 * 64 * 4 / 4096)
    r = WeightReceiver(plan, Loopback(1, {}))
    assert r._pack_arena.numel() == 0
    assert r.staging_bytes == 64 * 64 * 4


def test_mpi_transport_refuses_cuda_without_cuda_aware_mpi(monkeypatch):
    from mpi4py import MPI

    from transports.weights import MPIChannel, mpi_cuda_aware

    assert mpi_cuda_aware() in (True, False, None)
    monkeypatch.setenv("MPIRL_MPI_CUDA_AWARE", "0")
    assert mpi_cuda_aware() is False
    ch = MPIChannel(MPI.COMM_SELF)
    ch.check_device(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="not CUDA-aware"):
        ch.check_device(torch.device("cuda", 0))


def test_posts_from_a_thread_deliver_the_same_bytes(monkeypatch):
    monkeypatch.setattr(endpoints, "THREADED_POST_BYTES", 0)  # every push is large enough
    params = make_params(ODD, torch.float32, seed=3)
    needs = [Need(), Need()]
    inline, _ = sync(cut(params, 2), needs, bucket_bytes=256, pack_below=100)
    threaded, _ = sync(cut(params, 2), needs, bucket_bytes=256, pack_below=100, threaded=True)
    for g in inline:
        for k in params:
            assert torch.equal(inline[g][k], params[k]) and torch.equal(threaded[g][k], params[k])


class BlockingPosts(Loopback):
    """Posting waits for ``release`` (as a gloo send waits for the socket), or fails."""

    def __init__(self, rank, wire, release, fail=False):
        super().__init__(rank, wire, threaded_posts=True)
        self.release, self.fail = release, fail

    def isend(self, buf, dst, tag):
        assert self.release.wait(10)
        if self.fail:
            raise RuntimeError("connection reset by peer")
        return super().isend(buf, dst, tag)


def test_a_push_whose_posts_block_returns_at_once_and_wait_waits_for_them(monkeypatch):
    import threading

    monkeypatch.setattr(endpoints, "THREADED_POST_BYTES", 0)
    params = make_params([(6, 2), (4, 3)], torch.float32)
    sh = cut(params, 1)
    plan = build_plan({0: [ShardMeta.of(s) for s in sh[0]]}, {1: Need()})
    release, wire = threading.Event(), {}
    sender = WeightSender(plan, BlockingPosts(0, wire, release), copy=False)
    sender.push(sh[0], 1)  # returns while its thread is held in isend
    assert not wire and not sender.progress()
    threading.Timer(0.2, release.set).start()
    assert sender.wait() >= 0.1 and len(wire) == len(plan.sends(0))
    assert sender.stats.post_s >= 0.1 and sender.stats.version == 1


def test_an_error_in_the_posting_thread_is_raised_by_wait(monkeypatch):
    import threading

    monkeypatch.setattr(endpoints, "THREADED_POST_BYTES", 0)
    params = make_params([(6, 2)], torch.float32)
    sh = cut(params, 1)
    plan = build_plan({0: [ShardMeta.of(s) for s in sh[0]]}, {1: Need()})
    release = threading.Event()
    release.set()
    sender = WeightSender(plan, BlockingPosts(0, {}, release, fail=True))
    sender.push(sh[0], 4)
    with pytest.raises(RuntimeError, match="posting the weight sends of version 4 failed: connection reset"):
        sender.wait()
    assert sender.wait() == 0.0  # raised once; the sender is idle again


def test_a_small_push_is_posted_inline_even_where_posting_blocks():
    import threading

    params = make_params([(6, 2)], torch.float32)
    sh = cut(params, 1)
    plan = build_plan({0: [ShardMeta.of(s) for s in sh[0]]}, {1: Need()})
    release, wire = threading.Event(), {}
    release.set()
    sender = WeightSender(plan, BlockingPosts(0, wire, release))
    sender.push(sh[0], 1)
    assert len(wire) == len(plan.sends(0)) and sender._poster is None  # posted before push returned


def test_default_packing_grows_with_the_generators_a_piece_goes_to():
    """pack_below_per_peer: a piece is packed below pack_below x the generators it goes to."""
    params = make_params([(3, 25), (6, 25)], torch.float32)  # 300 and 600 bytes
    metas = {0: [ShardMeta.of(s) for s in cut(params, 1)[0]]}

    def packed(n_gens, per_peer, bucket_bytes=4096):
        plan = build_plan(
            metas,
            {g: Need() for g in range(1, n_gens + 1)},
            bucket_bytes=bucket_bytes,
            pack_below=200,
            pack_below_per_peer=per_peer,
        )
        return sorted(pc.name for bk in plan.buckets if len(bk.pieces) > 1 for pc in bk.pieces)

    assert packed(4, per_peer=False) == []  # both pieces are over 200 bytes
    assert packed(2, per_peer=True) == []  # 400: still both over
    assert packed(4, per_peer=True) == ["p0.weight", "p1.weight"]  # 800
    assert packed(4, per_peer=True, bucket_bytes=512) == []  # never past a bucket


def test_the_transport_default_packs_per_peer_and_a_given_pack_below_is_kept():
    """gather_plan (over a stand-in for the allgather): with pack_below None two 100 KiB pieces
    bound for 2 generators share a bucket (the CPU default, 64 KiB, per generator); the same
    64 KiB given explicitly is taken as it is: each travels alone."""
    from transports import weights

    class TwoGenerators:
        def allgather(self, mine):  # this trainer's entry, then two generators'
            return [mine, (1, None, Need(), mine[3], None), (2, None, Need(), mine[3], None)]

        def Get_rank(self):
            return 0

    shards = cut(make_params([(25, 1024), (25, 1024)], torch.float32), 1)[0]
    for given, pieces_per_bucket in ((None, [2]), (64 << 10, [1, 1])):
        plan = weights.gather_plan(TwoGenerators(), 0, shards=shards, pack_below=given)
        assert [len(bk.pieces) for bk in plan.buckets] == pieces_per_bucket
        assert plan.pack_below == 64 << 10
