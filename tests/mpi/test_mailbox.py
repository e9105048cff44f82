"""Mailbox and MPI transport under mpirun: ordering, sizes, back-pressure, no deadlock, errors.

Run with ``mpirun -n 4 --oversubscribe python -m pytest --with-mpi tests/mpi``. Rank 0 is the
"hub", the others "spoke"s. Every wait is bounded, and the conftest aborts the job if a test
runs past its timeout, so a hang is a failure.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from runtime import Address, Mailbox
from transports import codec
from transports.codec import CodecError

WAIT_S = 30.0  # any single expected message arrives well within this


@codec.message(name="MailboxTestSeq")
class Seq:
    seq: int
    data: object = None  # bytes or an array: exercises both the in-band and out-of-band paths


@codec.message(name="MailboxTestDone")
class Done:
    count: int = 0


@pytest.fixture
def hub_and_spokes(comm, open_mailbox):
    """``hub_and_spokes(max_inflight_bytes=...)``: rank 0 is "hub 0", the others "spoke i"."""
    roles = ["hub"] + ["spoke"] * (comm.Get_size() - 1)
    return lambda **kwargs: open_mailbox(roles, **kwargs)


def receive(mb: Mailbox, n: int, timeout_s: float = WAIT_S) -> list:
    """Exactly ``n`` envelopes, polling without sleeping; fail if they do not all come in time."""
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n:
        env = mb.poll()
        if env is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{mb.address}: got {len(out)} of {n} messages in {timeout_s} s")
            mb.progress()
            time.sleep(0)
            continue
        out.append(env)
    return out


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def pattern(nbytes: int, salt: int = 0) -> np.ndarray:
    """Deterministic random bytes (the same on every rank), so a reordered or shifted chunk is caught."""
    return np.random.default_rng([nbytes, salt]).integers(0, 256, nbytes, dtype=np.uint8)


# ------------------------------------------------------------------- ordering


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_per_sender_order_with_many_senders(comm, hub_and_spokes):
    n = 300
    mb = hub_and_spokes()
    if comm.rank == 0:
        got = receive(mb, n * (comm.size - 1))
        by_sender: dict[Address, list[int]] = {}
        for env in got:
            by_sender.setdefault(env.sender, []).append(env.msg.seq)
            if isinstance(env.msg.data, np.ndarray):  # payload belongs to its sequence number
                assert env.msg.data[0] == env.msg.seq % 256 and env.msg.data[-1] == env.msg.seq % 256
        assert set(by_sender) == {Address("spoke", i) for i in range(comm.size - 1)}
        for sender, seqs in by_sender.items():
            assert seqs == list(range(n)), f"{sender}: messages out of order"
    else:
        for i in range(n):
            # Mostly small messages, with large (out-of-band) ones mixed in: a large one must
            # not be overtaken by the small ones sent after it.
            data = np.full(100_000, i % 256, np.uint8) if i % 25 == 0 else b"x" * (i % 7)
            mb.send(("hub", 0), Seq(i, data))
    mb.close(timeout_s=WAIT_S)
    assert mb.closed and mb.dropped_after_close == 0


# ---------------------------------------------------------------------- sizes

SIZES = [1, 2, 255, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, (1 << 20) + 3, 16 << 20, 64 << 20]


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(90)
def test_messages_from_1_byte_to_64_mib_arrive_intact(comm, hub_and_spokes):
    mb = hub_and_spokes()
    if comm.rank == 1:
        for i, size in enumerate(SIZES):
            mb.send(("hub", 0), Seq(2 * i, pattern(size, i)))  # an array (out-of-band past 64 KiB)
            mb.flush(timeout_s=WAIT_S)  # bounds the sender's memory: one size at a time
            mb.send(("hub", 0), Seq(2 * i + 1, pattern(size, i).tobytes()))  # bytes: always in the header
            mb.flush(timeout_s=WAIT_S)
    elif comm.rank == 0:
        for i, size in enumerate(SIZES):
            arr, raw = receive(mb, 2)
            want = pattern(size, i)
            assert arr.sender == raw.sender == Address("spoke", 0)
            assert (arr.msg.seq, raw.msg.seq) == (2 * i, 2 * i + 1)
            assert isinstance(arr.msg.data, np.ndarray) and arr.msg.data.dtype == np.uint8
            assert arr.msg.data.shape == (size,) and np.array_equal(arr.msg.data, want), f"array of {size} B"
            assert isinstance(raw.msg.data, bytes) and len(raw.msg.data) == size
            assert raw.msg.data == want.tobytes(), f"bytes of {size} B"
            del arr, raw, want
    mb.close(timeout_s=WAIT_S)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_headers_either_side_of_a_receive_slot_keep_their_order(comm, hub_and_spokes):
    # A header that fits a posted slot travels in it; one byte more and it follows on the
    # buffer tag, announced in the slot. Every spoke sends a sweep of sizes across that edge,
    # interleaved with tiny messages (batched), and the hub checks bytes and order per sender.
    from transports.mpi_transport import SLOT_BYTES

    sizes = [n for n in range(SLOT_BYTES - 64, SLOT_BYTES + 16)] + [2 * SLOT_BYTES]
    mb = hub_and_spokes()
    if comm.rank == 0:
        got = receive(mb, 2 * len(sizes) * (comm.size - 1))
        by_sender: dict[Address, list] = {}
        for env in got:
            by_sender.setdefault(env.sender, []).append(env.msg)
        for sender, msgs in by_sender.items():
            assert [m.seq for m in msgs] == list(range(2 * len(sizes))), f"{sender}: out of order"
            for i, size in enumerate(sizes):
                assert msgs[2 * i].data == pattern(size, sender.index).tobytes(), f"{sender}: {size} B"
                assert msgs[2 * i + 1].data == b"y"
    else:
        for i, size in enumerate(sizes):
            mb.send(("hub", 0), Seq(2 * i, pattern(size, comm.rank - 1).tobytes()))
            mb.send(("hub", 0), Seq(2 * i + 1, b"y"))
    mb.close(timeout_s=WAIT_S)
    assert mb.dropped_after_close == 0


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_every_dtype_and_shape_across_ranks(comm, hub_and_spokes):
    import torch

    values = {
        "ids": np.arange(12, dtype=np.int64).reshape(3, 4),
        "logp": torch.linspace(-3, 0, 200_000, dtype=torch.float32),  # out-of-band tensor
        "bf16": torch.tensor([1.5, -2.0, 3.25e-3, 1e30, 0.0]).to(torch.bfloat16),
        "mask": np.array([True, False, True]),
        "scalar": np.float64(2.5),
        "zero_d": np.array(7, dtype=np.int32),
        "empty": np.zeros((0, 5), np.float16),
    }
    mb = hub_and_spokes()
    if comm.rank == 1:
        mb.send(("hub", 0), Seq(0, values))
    elif comm.rank == 0:
        (env,) = receive(mb, 1)
        got = env.msg.data
        assert isinstance(got["logp"], torch.Tensor) and torch.equal(got["logp"], values["logp"])
        assert got["bf16"].dtype == torch.bfloat16 and torch.equal(got["bf16"], values["bf16"])
        assert got["ids"].dtype == np.int64 and np.array_equal(got["ids"], values["ids"])
        assert got["mask"].dtype == bool and np.array_equal(got["mask"], values["mask"])
        assert got["scalar"] == 2.5
        assert got["zero_d"].shape == () and got["zero_d"] == 7
        assert got["empty"].shape == (0, 5) and got["empty"].dtype == np.float16
    mb.close(timeout_s=WAIT_S)


# --------------------------------------------------------------- back-pressure


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(90)
def test_back_pressure_bounds_bytes_in_flight_and_memory(comm, hub_and_spokes):
    bound = 4 << 20
    msg_bytes = 2 << 20
    n = 40  # 80 MiB in all: far more than the bound
    mb = hub_and_spokes(max_inflight_bytes=bound)
    if comm.rank == 1:
        one_message = msg_bytes + 4096  # the array plus a generous header
        mb.send(("hub", 0), Seq(-1, np.zeros(msg_bytes, np.uint8)))  # warm up allocator and MPI
        mb.flush(timeout_s=WAIT_S)
        base = rss_bytes()
        peak_inflight = peak_rss = 0
        for i in range(n):
            mb.send(("hub", 0), Seq(i, np.full(msg_bytes, i % 256, np.uint8)))  # a fresh array each time
            peak_inflight = max(peak_inflight, mb.transport.inflight_bytes)
            assert mb.transport.inflight_bytes <= bound + one_message, (
                f"{mb.transport.inflight_bytes} bytes in flight, bound {bound}"
            )
            peak_rss = max(peak_rss, rss_bytes() - base)
        mb.flush(timeout_s=WAIT_S)
        assert mb.transport.inflight_bytes == 0 and mb.transport.pending_sends == 0
        assert peak_inflight >= msg_bytes  # the bound was what held the sender back
        # Without back-pressure the sender would hold all n arrays (80 MiB) until they were taken.
        assert peak_rss < 32 << 20, f"sender RSS grew by {peak_rss / 2**20:.1f} MiB"
    elif comm.rank == 0:
        receive(mb, 1)
        for i in range(n):
            time.sleep(0.01)  # a slow consumer
            (env,) = receive(mb, 1)
            assert env.msg.seq == i and env.msg.data[0] == i % 256 and env.msg.data[-1] == i % 256
    mb.close(timeout_s=WAIT_S)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_simultaneous_large_sends_both_ways_do_not_deadlock(comm, hub_and_spokes):
    # Both ranks send before either receives, with bounds smaller than one message: each
    # send must wait for the other side to receive, so each must keep receiving while it waits.
    n, size = 12, 4 << 20
    mb = hub_and_spokes(max_inflight_bytes=1 << 20)
    if comm.rank in (0, 1):
        peer = ("spoke", 0) if comm.rank == 0 else ("hub", 0)
        for i in range(n):
            mb.send(peer, Seq(i, pattern(size, 100 * comm.rank + i)))
        got = receive(mb, n)
        other = 1 - comm.rank
        assert [e.msg.seq for e in got] == list(range(n))
        for e in got:
            assert np.array_equal(e.msg.data, pattern(size, 100 * other + e.msg.seq))
        mb.flush(timeout_s=WAIT_S)
    mb.close(timeout_s=WAIT_S)


@pytest.mark.mpi(min_size=3)
@pytest.mark.timeout(60)
def test_all_to_all_large_messages_do_not_deadlock(comm, hub_and_spokes):
    n, size = 4, 2 << 20
    mb = hub_and_spokes(max_inflight_bytes=1 << 20)
    peers = [r for r in range(comm.size) if r != comm.rank]
    for i in range(n):
        for r in peers:
            mb.send(mb.role_table.whois(r), Seq(i, np.full(size, comm.rank, np.uint8)))
    got = receive(mb, n * len(peers))
    for env in got:
        assert env.msg.data[0] == mb.role_table.rank_of(*env.sender)
    mb.close(timeout_s=WAIT_S)


# ------------------------------------------------------------------ addressing


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_send_role_and_send_all(comm, hub_and_spokes):
    mb = hub_and_spokes()
    if comm.rank == 0:
        mb.send_role("spoke", Seq(1, b"to spokes"))
        mb.send_all(Seq(2, b"to all"), include_self=True)
    expected = {1: b"to spokes", 2: b"to all"} if comm.rank else {2: b"to all"}
    got = receive(mb, len(expected))
    assert {e.msg.seq: e.msg.data for e in got} == expected
    assert all(e.sender == Address("hub", 0) for e in got)
    mb.close(timeout_s=WAIT_S)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_wait_times_out_and_checks_types(comm, hub_and_spokes):
    mb = hub_and_spokes()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="no message within"):
        mb.wait(timeout_s=0.2)
    assert time.monotonic() - t0 < 5
    # No rank sends before every rank's wait has timed out: a rank whose wait started late
    # would otherwise rightly take the message below, sent when the sender's 0.2 s were up.
    comm.Barrier()
    if comm.rank == 1:
        mb.send(("hub", 0), Seq(0))
        mb.send(("hub", 0), Done(1))
    elif comm.rank == 0:
        assert isinstance(mb.wait(timeout_s=WAIT_S, types=[Seq]).msg, Seq)
        with pytest.raises(RuntimeError, match="expected \\['Seq'\\], got Done"):
            mb.wait(timeout_s=WAIT_S, types=[Seq])
    mb.close(timeout_s=WAIT_S)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_unknown_message_type_on_the_receiver_is_a_codec_error(comm, hub_and_spokes):
    mb = hub_and_spokes()
    if comm.rank == 1:

        @codec.message(name="MailboxTestOnlyOnRank1")
        class OnlyHere:  # registered on this rank alone: the hub cannot decode it
            x: int = 0

        mb.send(("hub", 0), OnlyHere(3))
    elif comm.rank == 0:
        deadline = time.monotonic() + WAIT_S
        with pytest.raises(CodecError, match="unknown message type 'MailboxTestOnlyOnRank1'"):
            while mb.poll() is None:
                assert time.monotonic() < deadline, "the message never came"
    mb.close(timeout_s=WAIT_S)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_close_drops_late_messages_and_returns_everywhere(comm, hub_and_spokes):
    mb = hub_and_spokes()
    if comm.rank != 0:
        for i in range(5):
            mb.send(("hub", 0), Seq(i, np.zeros(200_000, np.uint8)))  # the hub never reads these
    t0 = time.monotonic()
    mb.close(timeout_s=WAIT_S)
    assert mb.closed and time.monotonic() - t0 < WAIT_S
    if comm.rank == 0:
        assert mb.dropped_after_close == 5 * (comm.size - 1)
    mb.close()  # a second close is a no-op


# ------------------------------------------------------------ receive buffers


def data_ptr(a) -> int:
    """The address of an array's or a buffer's memory (a temporary view: it holds nothing)."""
    return np.frombuffer(a, dtype=np.uint8).__array_interface__["data"][0]


def _compiled_unusable() -> str | None:
    """Why the compiled transport cannot be used here, or None if it can."""
    from transports.choose import compiled_transport

    found = compiled_transport()
    return f"compiled transport {found}" if isinstance(found, str) else None


def _receive_buffer_pools():
    from transports.mpi_transport import _ReceiveBuffers

    if reason := _compiled_unusable():
        return [_ReceiveBuffers, pytest.param(None, marks=pytest.mark.skip(reason=reason))]
    from transports.fast_buffers import ReceiveBuffers

    return [_ReceiveBuffers, ReceiveBuffers]


@pytest.mark.parametrize("pool_class", _receive_buffer_pools(), ids=["python", "compiled"])
def test_receive_buffers_come_back_only_when_every_view_is_gone(pool_class):
    # No MPI needed: the pool that large receives are taken from (each transport has its
    # own). CPython frees on the last reference, so every ``del`` below ends a loan at once.
    import torch

    pool = pool_class(min_bytes=1 << 20, max_free_bytes=4 << 20)
    small = pool.take(1000)
    assert len(small) == 1000 and pool.free_bytes == 0  # small ones are never pooled
    a = pool.take(1 << 20)
    view = memoryview(a)
    assert view.nbytes == 1 << 20 and not view.readonly and view.format in ("B", "<B", "|u1")
    del view
    a = np.frombuffer(a, dtype=np.uint8)  # as the codec reads it: the array holds the loan
    ptr = data_ptr(a)
    t = torch.from_numpy(np.frombuffer(a, dtype=np.float32).reshape(512, -1))[3:5]  # a decoded tensor's view
    del a
    assert pool.free_bytes == 0, "given back while a tensor still uses it"
    b = pool.take(1 << 20)
    assert data_ptr(b) != ptr
    del t
    assert pool.free_bytes == 1 << 20
    c = pool.take(1 << 20)
    assert data_ptr(c) == ptr and pool.free_bytes == 0  # reused
    d = pool.take(2 << 20)
    del b, c, d
    assert pool.free_bytes == 4 << 20  # within the bound: 1 + 1 + 2 MiB
    e = pool.take(3 << 20)
    del e
    assert pool.free_bytes == 4 << 20  # a 3 MiB buffer would pass the bound: dropped, not kept


def test_a_receive_buffer_not_from_its_pool_lends_no_memory():
    if reason := _compiled_unusable():
        pytest.skip(reason)
    from transports.fast_buffers import ReceiveBuffer

    with pytest.raises(ValueError, match="ReceiveBuffers.take"):
        memoryview(ReceiveBuffer())  # no block behind it: an error, not a read of address 0


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_a_kept_large_message_is_never_overwritten(comm, hub_and_spokes):
    size, n = 2 << 20, 6
    mb = hub_and_spokes()
    if comm.rank == 1:
        for i in range(n):
            mb.send(("hub", 0), Seq(i, pattern(size, i)))
            mb.wait(timeout_s=WAIT_S, types=[Done])  # one at a time: the hub decides what it keeps
    elif comm.rank == 0:
        kept, ptrs = [], []
        for i in range(n):
            (env,) = receive(mb, 1)
            ptrs.append(data_ptr(env.msg.data))
            if i % 2 == 0:
                kept.append((i, env.msg.data))  # even ones are kept, odd ones dropped at once
            del env
            mb.send(("spoke", 0), Done(i))
        for i, data in kept:
            assert np.array_equal(data, pattern(size, i)), f"message {i} was overwritten"
        assert len({ptrs[i] for i in range(0, n, 2)}) == n // 2  # kept ones never share a buffer
        # A dropped message's buffer is the next message's: 1 -> 2, 3 -> 4.
        assert ptrs[2] == ptrs[1] and ptrs[4] == ptrs[3], ptrs


@pytest.mark.timeout(30)
def test_a_batch_that_could_outgrow_a_receive_slot_is_refused():
    from mpi4py import MPI

    from transports.mpi_transport import SLOT_BYTES, MPITransport

    with pytest.raises(ValueError, match="batch_bytes must be between 0 and"):
        MPITransport(MPI.COMM_SELF, batch_bytes=SLOT_BYTES)
    t = MPITransport(MPI.COMM_SELF.Dup(), batch_bytes=0)  # coalescing off is fine
    assert t.close() == 0 and t.close() == 0  # a second close is a no-op
    t.comm.Free()
