"""The Python transport and the compiled one, side by side and mixed, under mpirun.

transports/fast_transport.pyx must do exactly what transports/mpi_transport.py does: the
same wire (so ranks may mix them), the same batching, the same counters and the same
errors. Each test here runs with every rank on the Python transport, every rank on the
compiled one, and the two mixed (even ranks one, odd ranks the other). When the compiled
one is not built, its cases are skipped with the reason; ``make test`` builds it.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

from transports import codec
from transports.choose import compiled_transport
from transports.mpi_transport import BATCH, HEADER_TAG, SLOT_BYTES, MPITransport

WAIT_S = 30.0
COMPILED = compiled_transport()
LAYOUTS = ["python", "compiled", "mixed"]


def transport_for(layout: str, rank: int):
    # Skipped on every rank alike: a rank left running a mixed test alone would wait for its peers.
    if layout != "python" and isinstance(COMPILED, str):
        pytest.skip(f"the compiled transport is {COMPILED}")
    if layout == "python" or (layout == "mixed" and rank % 2 == 0):
        return MPITransport
    return COMPILED


@pytest.fixture(params=LAYOUTS)
def transports(request, comm):
    """``transports(**kwargs)``: this rank's transport on a fresh duplicate of ``comm``."""
    made = []

    def make(**kwargs):
        cls = transport_for(request.param, comm.Get_rank())
        t = cls(comm.Dup(), **kwargs)
        made.append(t)
        return t

    yield make
    for t in made:
        t.flush(timeout_s=WAIT_S)
        t.comm.Barrier()
        t.close()
        t.comm.Free()


def take(t, n: int) -> list:
    """``n`` received messages (batches split), as (source, header bytes, buffers)."""
    out = []
    deadline = time.monotonic() + WAIT_S
    while len(out) < n:
        got = t.poll()
        if got is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"got {len(out)} of {n} messages in {WAIT_S} s")
            t.progress()
            time.sleep(0)
            continue
        for i, header in enumerate(got.headers):
            out.append((got.source, bytes(header), got.buffers if i == len(got.headers) - 1 else []))
    return out


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_a_stream_of_small_messages_is_batched_and_keeps_its_order(comm, transports):
    t = transports()
    rank, size = comm.Get_rank(), comm.Get_size()
    n = 3000
    if rank != 0:
        for i in range(n):
            t.send(0, [i.to_bytes(4, "little") + bytes([rank]) * (i % 40)])
        t.flush(timeout_s=WAIT_S)
        assert t.messages_sent == n
        # The receiver was slower than the sender: most messages went in batches.
        assert t.mpi_messages_sent < n
        assert t.pending_sends == 0 and t.inflight_bytes == 0
    else:
        got = take(t, n * (size - 1))
        by_sender: dict[int, list[int]] = {}
        for source, header, buffers in got:
            assert buffers == []
            i = int.from_bytes(header[:4], "little")
            assert header[4:] == bytes([source]) * (i % 40)
            by_sender.setdefault(source, []).append(i)
        assert by_sender == {r: list(range(n)) for r in range(1, size)}
    sent = comm.allreduce(t.bytes_sent)
    received = comm.allreduce(t.bytes_received)
    assert sent == received  # every byte that went out was counted in, batches and all


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_buffers_and_oversized_headers_follow_the_batch_they_come_after(comm, transports):
    t = transports()
    rank = comm.Get_rank()
    big_header = bytes(range(256)) * (SLOT_BYTES // 256 + 8)  # over a receive slot: announced, then sent
    array = np.arange(300_000, dtype=np.float32)
    if rank == 1:
        for i in range(50):
            t.send(0, [b"small %d" % i])
        t.send(0, [b"with buffers", array, memoryview(b"xyz")])
        t.send(0, [big_header])
        t.send(0, [big_header, array[:10]])
        t.send(0, [b"last"])
        t.flush(timeout_s=WAIT_S)
    elif rank == 0:
        got = take(t, 54)
        assert [h for _, h, _ in got[:50]] == [b"small %d" % i for i in range(50)]
        (_, h, bufs) = got[50]
        assert h == b"with buffers" and len(bufs) == 2
        assert np.array_equal(np.frombuffer(bufs[0], np.float32), array) and bytes(bufs[1]) == b"xyz"
        assert got[51][1] == big_header and got[51][2] == []
        assert got[52][1] == big_header and np.array_equal(np.frombuffer(got[52][2][0], np.float32), array[:10])
        assert got[53][1] == b"last"


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_back_pressure_holds_bytes_in_flight_to_the_bound(comm, transports):
    bound = 4 << 20
    t = transports(max_inflight_bytes=bound)
    rank = comm.Get_rank()
    chunk = np.ones(1 << 20, np.uint8)
    if rank == 1:
        peak = 0
        for i in range(40):
            t.send(0, [b"chunk %d" % i, chunk])
            peak = max(peak, t.inflight_bytes)
        assert bound - len(chunk) < peak <= bound  # filled, never over
        t.flush(timeout_s=WAIT_S)
    elif rank == 0:
        time.sleep(0.5)  # the sender fills its bound before anything is taken
        got = take(t, 40)
        assert [h for _, h, _ in got] == [b"chunk %d" % i for i in range(40)]


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_bad_destinations_and_bad_header_messages_are_errors(comm, transports):
    t = transports()
    size = comm.Get_size()
    # MPI's own error (Python transport) or the compiled one's ValueError: both name the rank.
    with pytest.raises((ValueError, MPI.Exception), match=r"(?i)rank"):
        t.send(size, [b"nobody"])
    with pytest.raises((ValueError, MPI.Exception), match=r"(?i)rank"):
        t.send(size + 5, [b"nobody", np.zeros(4, np.uint8)])
    assert t.pending_sends == 0
    # A 2-byte header message (no rank of ours sends one) and a batch cut short are refused
    # by name, and the transport goes on with the next message.
    if comm.Get_rank() == 1:
        comm_t = t.comm
        comm_t.Ssend([b"\x01\x02", 2, MPI.BYTE], 0, HEADER_TAG)
        cut = BATCH.to_bytes(4, "little") + (10).to_bytes(4, "little") + b"abc"
        comm_t.Ssend(cut, 0, HEADER_TAG)
        t.send(0, [b"after"])
        t.flush(timeout_s=WAIT_S)
    elif comm.Get_rank() == 0:
        errors = []
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                got = t.poll()
            except RuntimeError as e:
                errors.append(str(e))
                continue
            if got is not None:
                break
            assert time.monotonic() < deadline, errors
        assert len(errors) == 2 and "2-byte header message from rank 1" in errors[0]
        assert "cut short" in errors[1]
        assert got.headers == [b"after"]


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_close_counts_what_it_drops_and_a_second_close_is_a_no_op(comm, transports):
    t = transports()
    if comm.Get_rank() == 1:
        t.send(0, [b"never taken"])
        t.flush(timeout_s=WAIT_S)  # the message sits in rank 0's slot
    comm.Barrier()
    dropped = t.close()
    assert dropped == (1 if comm.Get_rank() == 0 else 0)
    assert t.close() == 0 and t.poll() is None


def test_the_codec_frames_of_a_message_go_through_either_transport_unchanged():
    """A single-rank loop: what the mailbox sends is what comes back, on both classes."""

    @codec.message(name="TransportImplsLoop")
    class Loop:
        seq: int
        data: object

    classes = [MPITransport] + ([] if isinstance(COMPILED, str) else [COMPILED])
    for cls in classes:
        t = cls(MPI.COMM_SELF.Dup())
        msg = Loop(7, np.arange(1 << 18, dtype=np.int64))
        t.send(0, codec.encode_frames(msg))
        got = take(t, 1)[0]
        back = codec.decode(got[1], got[2])
        assert back.seq == 7 and np.array_equal(back.data, msg.data), cls
        t.flush(timeout_s=WAIT_S)
        t.close()
        t.comm.Free()
