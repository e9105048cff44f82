"""Where a mailbox round trip's time goes: the same ping-pong, one layer added at a time.

    mpirun -n 2 python bench/mailbox_parts.py [--pings 2000] [--reps 7]

Each rung is the 64-byte ping-pong of ``bench/mailbox.py`` with one more layer of the
mailbox's path, all measured in one run, alternating, medians of ``--reps``:

1. ``raw``: ``Irecv`` posted ahead, ``Isend``, ``Wait`` (bench/mailbox.py's baseline);
2. ``posted``: what the transport does on the wire, by hand: a synchronous-mode ``Issend`` into
   a persistent receive posted ahead, polled with ``Test`` (yielding the core between polls
   where Open MPI's ``Wait`` would: bench/wait_policy.py) and posted again once its bytes are
   copied out;
3. ``transport``: the mailbox's transport's ``send`` / ``poll`` of pre-encoded bytes (its
   framing, batching check, completion tracking, received-message bookkeeping): the compiled
   one when built (transports/choose.py; ``MPIRL_TRANSPORT=python`` measures the Python one);
4. ``mailbox``: ``Mailbox.send`` / ``poll`` of a typed message (the msgpack codec, its
   validation, the envelope). The line's ``transport`` key names the class.

The differences between rungs are what each layer costs a round trip. ``posted_msgpack`` is
the floor of this design in Python: the ``posted`` wire carrying the mailbox's map packed and
unpacked by msgpack alone (no checks, framing or message class), so no Python mailbox that
speaks msgpack over this wire can beat it; ``posted_msgpack_over_raw`` is that floor in units
of the raw round trip. ``posted_msgspec`` asks whether a faster codec would lower that floor
enough: the same wire carrying the message encoded by msgspec (a msgpack codec written in C
that also validates into a typed class, the fastest one for Python; installed with vLLM) and
decoded into a typed struct (null when msgspec is not installed). Those two floors are why
the mailbox's path is compiled (transports/fast_*.pyx, runtime/fast_mailbox.pyx): with it the ``transport``
rung sits on ``raw`` and the ``mailbox`` rung under ``posted_msgpack``. ``probe`` is context:
the transport's earlier wire, a receive found by polling ``Improbe`` then ``Recv`` of the
matched message into a buffer of its size. Single-process figures
split the last one: ``encode_us`` and ``decode_us`` of the message, each timed alone, and
``compiled_encode_us`` / ``compiled_decode_us`` on the compiled path.
Prints ONE JSON line on rank 0, round trips in microseconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import timeit
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgpack  # noqa: E402
from mpi4py import MPI  # noqa: E402
from wait_policy import yield_when_idle  # noqa: E402

from runtime import Mailbox, RoleTable  # noqa: E402
from transports import codec  # noqa: E402
from transports.choose import compiled_transport, transport_class  # noqa: E402
from transports.mpi_transport import MPITransport  # noqa: E402

TAG = 21
YIELD = False  # set in main(): whether the wait loops give the core away (bench/wait_policy.py)
PAYLOAD = bytes(range(64))  # bench/mailbox.py's small message: the same 64 bytes


@codec.message(name="BenchPartsSmall")
class Small:
    seq: int
    data: bytes


def raw(comm: MPI.Comm, n: int) -> float:
    peer, buf = 1 - comm.rank, bytearray(len(PAYLOAD))
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        if comm.rank == 0:
            r = comm.Irecv([buf, MPI.BYTE], peer, TAG)
            comm.Isend([PAYLOAD, MPI.BYTE], peer, TAG).Wait()
            r.Wait()
        else:
            comm.Irecv([buf, MPI.BYTE], peer, TAG).Wait()
            comm.Isend([PAYLOAD, MPI.BYTE], peer, TAG).Wait()
    return time.perf_counter() - t0


def ssend_pingpong(comm: MPI.Comm, n: int, take, make=None) -> float:
    """Round trips sent in synchronous mode, each reply received by ``take()``; seconds.
    ``make(i)``: the bytes of the i-th message (None: the 64-byte payload itself, no call)."""
    peer, pending = 1 - comm.rank, []
    comm.Barrier()
    t0 = time.perf_counter()
    for i in range(n):
        if comm.rank == 0:
            pending.append(comm.Issend([make(i) if make else PAYLOAD, MPI.BYTE], peer, TAG))
            take()
        else:
            take()
            pending.append(comm.Issend([make(i) if make else PAYLOAD, MPI.BYTE], peer, TAG))
        if len(pending) > 64:
            MPI.Request.Waitall(pending)
            pending.clear()
    MPI.Request.Waitall(pending)
    return time.perf_counter() - t0


def probe(comm: MPI.Comm, n: int) -> float:
    peer, status = 1 - comm.rank, MPI.Status()

    def take():
        while True:
            msg = comm.Improbe(peer, TAG, status=status)
            if msg is not None:
                out = bytearray(status.Get_count(MPI.BYTE))
                msg.Recv([out, MPI.BYTE])
                return out
            if YIELD:
                os.sched_yield()

    return ssend_pingpong(comm, n, take)


def posted(comm: MPI.Comm, n: int, make=None, unpack=None) -> float:
    """The posted wire by hand. ``make(i)``: the bytes of message i (None: the payload itself);
    ``unpack(bytes)``: what the receiver does with the bytes it copied out (None: nothing)."""
    peer, status = 1 - comm.rank, MPI.Status()
    slot = bytearray(4096)
    request = comm.Recv_init([slot, MPI.BYTE], peer, TAG)
    request.Start()

    def take():
        while not request.Test(status):
            if YIELD:
                os.sched_yield()
        out = bytes(memoryview(slot)[: status.Get_count(MPI.BYTE)])
        request.Start()
        return unpack(out) if unpack else out

    elapsed = ssend_pingpong(comm, n, take, make)
    comm.Barrier()  # every message taken: the last posted receive can go
    request.Cancel()
    request.Wait()
    request.Free()
    return elapsed


def posted_msgpack(comm: MPI.Comm, n: int) -> float:
    """Each message is the mailbox's map packed by msgpack alone (a reused Packer) and unpacked
    on arrival, with no checks, no framing, no message class: the least that typed msgpack
    messages over this wire cost in Python."""
    pack = msgpack.Packer().pack

    def make(i: int) -> bytes:
        return pack({"type": "BenchPartsSmall", "v": codec.SCHEMA_VERSION, "seq": i, "data": PAYLOAD})

    return posted(comm, n, make, msgpack.unpackb)


def posted_msgspec(comm: MPI.Comm, n: int) -> float:
    """The ``posted`` wire carrying a typed message as msgspec encodes and decodes it, with
    validation (in C) and a tagged union to dispatch on, as a mailbox needs."""
    import msgspec

    class Struct(msgspec.Struct, tag="BenchPartsSmall", tag_field="type", forbid_unknown_fields=True):
        seq: int
        data: bytes

    class Other(msgspec.Struct, tag="BenchPartsOther", tag_field="type"):  # a union to dispatch on
        seq: int

    encode = msgspec.msgpack.Encoder().encode
    return posted(comm, n, lambda i: encode(Struct(i, PAYLOAD)), msgspec.msgpack.Decoder(Struct | Other).decode)


def transport(t: MPITransport, comm: MPI.Comm, n: int, frames: list) -> float:
    peer = 1 - comm.rank

    def take():
        while (got := t.poll()) is None:
            t.progress()
            if YIELD:
                os.sched_yield()
        return got

    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        if comm.rank == 0:
            t.send(peer, frames)
            take()
        else:
            take()
            t.send(peer, frames)
    t.flush()
    return time.perf_counter() - t0


def mailbox(mb: Mailbox, comm: MPI.Comm, n: int) -> float:
    peer = ("b", 0) if comm.rank == 0 else ("a", 0)

    def take():
        while (env := mb.poll()) is None:
            mb.progress()
            if YIELD:
                os.sched_yield()
        return env.msg

    comm.Barrier()
    t0 = time.perf_counter()
    for i in range(n):
        if comm.rank == 0:
            mb.send(peer, Small(i, PAYLOAD))
            take()
        else:
            msg = take()
            mb.send(peer, Small(msg.seq, PAYLOAD))
    mb.flush()
    return time.perf_counter() - t0


def per_call_us(fn, number: int = 20000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    if world.Get_size() != 2:
        raise SystemExit("run with exactly 2 ranks: mpirun -n 2 python bench/mailbox_parts.py")
    comm = world.Dup()
    global YIELD
    YIELD = yield_when_idle(world)
    t = transport_class()(world.Dup())
    mb = Mailbox(RoleTable(world, ["a", "b"]))
    frames = codec.encode_frames(Small(0, PAYLOAD))
    rungs = {
        "raw": lambda: raw(comm, args.pings),
        "probe": lambda: probe(comm, args.pings),
        "posted": lambda: posted(comm, args.pings),
        "posted_msgpack": lambda: posted_msgpack(comm, args.pings),
        "transport": lambda: transport(t, comm, args.pings, frames),
        "mailbox": lambda: mailbox(mb, comm, args.pings),
    }
    if importlib.util.find_spec("msgspec") is not None:
        rungs["posted_msgspec"] = lambda: posted_msgspec(comm, args.pings)
    for fn in rungs.values():  # warm-up: connections, buffers, caches
        fn()
    times = {k: [] for k in rungs}
    for _ in range(args.reps):
        for k, fn in rungs.items():
            times[k].append(fn() / args.pings * 1e6)
    rtt = {k: statistics.median(v) for k, v in times.items()}
    if world.rank == 0:
        msg = Small(7, PAYLOAD)
        header = bytes(frames[0])
        line = {
            "bench": "mailbox_parts",
            **{f"{k}_rtt_us": round(v, 2) for k, v in rtt.items()},
            "posted_over_raw_us": round(rtt["posted"] - rtt["raw"], 2),
            # The floor of the design in Python: the wire plus msgpack itself, nothing else.
            "posted_msgpack_over_raw": round(rtt["posted_msgpack"] / rtt["raw"], 2),
            # The same with the fastest codec there is for Python (None: msgspec not installed).
            "posted_msgspec_over_raw": (
                round(rtt["posted_msgspec"] / rtt["raw"], 2) if "posted_msgspec" in rtt else None
            ),
            "transport_over_posted_us": round(rtt["transport"] - rtt["posted"], 2),
            "mailbox_over_transport_us": round(rtt["mailbox"] - rtt["transport"], 2),
            "encode_us": round(per_call_us(lambda: codec.encode_frames(msg)), 2),
            "decode_us": round(per_call_us(lambda: codec.decode(header)), 2),
            # The same two on the compiled path, which packs and builds plain messages itself
            # (None: the mailbox runs on the Python transport).
            **compiled_codec_us(msg, header),
            "mailbox_over_raw": round(rtt["mailbox"] / rtt["raw"], 2),
            "yield_when_idle": YIELD,
            "transport": type(t).__name__,  # the transport and mailbox rungs' (transports/choose.py)
            "pings": args.pings,
            "reps": args.reps,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(line), flush=True)
    world.Barrier()


def compiled_codec_us(msg, header: bytes) -> dict:
    fast = compiled_transport()
    if isinstance(fast, str) or os.environ.get("MPIRL_TRANSPORT", "auto").strip().lower() == "python":
        return {"compiled_encode_us": None, "compiled_decode_us": None}
    from transports import fast_codec

    return {
        "compiled_encode_us": round(per_call_us(lambda: fast_codec.encode_frames(msg)), 2),
        "compiled_decode_us": round(per_call_us(lambda: fast_codec.decode(header)), 2),
    }


if __name__ == "__main__":
    main()
