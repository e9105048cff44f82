"""Mailbox vs raw mpi4py, side by side in one run, on the same bytes.

    mpirun -n 2 python bench/mailbox.py [--rounds 3] [--reps 9] [--small 5000] [--pings 1000] [--large-mib 64]
    python bench/mailbox.py --cross-node [...]     # the two ranks on two virtual nodes (TCP; root)

Three measurements, each taken for both contenders in alternating repetitions (so drift on
a noisy machine hits both alike), reported as medians:

- small-message rate: rank 0 sends ``--small`` messages with a 64-byte payload to rank 1,
  one way; the clock stops when rank 1 has them all (it acknowledges the last).
  raw: ``Isend`` of the 64 bytes, windowed ``Waitall``; ``Irecv`` + ``Wait`` per message.
  mailbox: a typed message holding the 64 bytes, ``send`` / ``poll``.
- round-trip latency: ping-pong of the same 64 bytes, ``--pings`` round trips.
- large-message bandwidth: one message holding a 64 MiB numpy array (the mailbox sends it
  out-of-band: no copy into the header); rank 1 acknowledges each. raw: ``Isend`` /
  ``Irecv`` of the same 64 MiB into a buffer allocated once. Both send from the same array.

Ratios are medians of the per-repetition pairs within a round; the line holds the median over
``--rounds`` rounds (3 by default) and, as ``*_spread``, the (min, max) of the rounds' ratios,
since one round's ratio moved by half between runs (0.42 to 0.64 for the small-message rate).
Two figures are context only, not targets: mpi4py's pickled object messages
(``isend``/``recv``) for the small rate, and raw receives into a fresh buffer per message for
the bandwidth.

Both sides poll without sleeping, so the figures are the software's cost, not a back-off; a
waiting mailbox rank yields its core between polls exactly where Open MPI's ``Wait`` does (more
ranks on the node than cores), and the line says so (``yield_when_idle``).
Prints ONE JSON line on rank 0; bandwidths are in GB/s (10^9 bytes per second).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from cross_node import link  # noqa: E402
from mpi4py import MPI  # noqa: E402
from wait_policy import yield_when_idle  # noqa: E402

from runtime import Mailbox, RoleTable  # noqa: E402
from transports import codec  # noqa: E402

PAYLOAD = bytes(range(64))  # the small message's bytes, the same for both contenders
TAG = 11
ACK_TAG = 12


@codec.message(name="BenchSmall")
class Small:
    seq: int
    data: bytes


@codec.message(name="BenchLarge")
class Large:
    seq: int
    data: np.ndarray


@codec.message(name="BenchAck")
class Ack:
    seq: int = 0


# --------------------------------------------------------------------------- raw


class Raw:
    """The baseline: mpi4py buffer calls on a communicator of their own."""

    def __init__(self, comm: MPI.Comm, large_bytes: int):
        self.comm = comm
        self.peer = 1 - comm.rank
        self.rbuf = bytearray(len(PAYLOAD))
        self.ack = bytearray(1)
        self.large = np.full(large_bytes, 7, np.uint8) if comm.rank == 0 else None
        self.rlarge = np.ones(large_bytes, np.uint8) if comm.rank == 1 else None  # touched: resident

    def small(self, n: int, window: int = 256) -> float:
        c, peer = self.comm, self.peer
        c.Barrier()
        t0 = time.perf_counter()
        if c.rank == 0:
            reqs = []
            for _ in range(n):
                reqs.append(c.Isend([PAYLOAD, MPI.BYTE], peer, TAG))
                if len(reqs) == window:
                    MPI.Request.Waitall(reqs)
                    reqs = []
            MPI.Request.Waitall(reqs)
            c.Recv([self.ack, MPI.BYTE], peer, ACK_TAG)
        else:
            for _ in range(n):
                c.Irecv([self.rbuf, MPI.BYTE], peer, TAG).Wait()
            assert bytes(self.rbuf) == PAYLOAD
            c.Send([self.ack, MPI.BYTE], peer, ACK_TAG)
        return time.perf_counter() - t0

    def pingpong(self, n: int) -> float:
        c, peer = self.comm, self.peer
        c.Barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            if c.rank == 0:
                r = c.Irecv([self.rbuf, MPI.BYTE], peer, TAG)
                c.Isend([PAYLOAD, MPI.BYTE], peer, TAG).Wait()
                r.Wait()
            else:
                c.Irecv([self.rbuf, MPI.BYTE], peer, TAG).Wait()
                c.Isend([PAYLOAD, MPI.BYTE], peer, TAG).Wait()
        return time.perf_counter() - t0

    def small_pickled(self, n: int, window: int = 256) -> float:
        """Context, not the target's baseline: mpi4py's own object messages (pickle)."""
        c, peer = self.comm, self.peer
        c.Barrier()
        t0 = time.perf_counter()
        if c.rank == 0:
            reqs = []
            for i in range(n):
                reqs.append(c.isend({"seq": i, "data": PAYLOAD}, peer, TAG))
                if len(reqs) == window:
                    MPI.Request.waitall(reqs)
                    reqs = []
            MPI.Request.waitall(reqs)
            c.Recv([self.ack, MPI.BYTE], peer, ACK_TAG)
        else:
            for _ in range(n):
                msg = c.recv(source=peer, tag=TAG)
            assert msg["data"] == PAYLOAD
            c.Send([self.ack, MPI.BYTE], peer, ACK_TAG)
        return time.perf_counter() - t0

    def large_one(self, fresh: bool = False) -> float:
        """One large message; ``fresh``: into a new buffer, as a receiver that keeps the data must."""
        c, peer = self.comm, self.peer
        c.Barrier()
        t0 = time.perf_counter()
        if c.rank == 0:
            c.Isend([self.large, MPI.BYTE], peer, TAG).Wait()
            c.Recv([self.ack, MPI.BYTE], peer, ACK_TAG)
        else:
            buf = np.empty_like(self.rlarge) if fresh else self.rlarge
            c.Irecv([buf, MPI.BYTE], peer, TAG).Wait()
            c.Send([self.ack, MPI.BYTE], peer, ACK_TAG)
        return time.perf_counter() - t0


# ----------------------------------------------------------------------- mailbox


class Box:
    """The same exchanges through a Mailbox (typed messages, msgpack, framed transport)."""

    def __init__(self, comm: MPI.Comm, large: np.ndarray | None):
        """``large``: the sender's large array, the raw contender's own (see main)."""
        self.comm = comm  # for the start barrier only
        self.mb = Mailbox(RoleTable(comm, ["a", "b"]))
        self.peer = ("b", 0) if comm.rank == 0 else ("a", 0)
        self.large = large
        self.yield_when_idle = yield_when_idle(comm)

    def _next(self):
        mb, yield_core = self.mb, self.yield_when_idle
        while True:
            env = mb.poll()
            if env is not None:
                return env.msg
            mb.progress()
            if yield_core:
                os.sched_yield()

    def small(self, n: int, progress_every: int = 256) -> float:
        mb = self.mb
        self.comm.Barrier()
        t0 = time.perf_counter()
        if self.comm.rank == 0:
            for i in range(n):
                mb.send(self.peer, Small(i, PAYLOAD))
                if i % progress_every == 0:
                    mb.progress()  # what an actor's loop does between handlers
            assert isinstance(self._next(), Ack)
        else:
            for _ in range(n):
                msg = self._next()
            assert msg.seq == n - 1 and msg.data == PAYLOAD
            mb.send(self.peer, Ack(n))
        mb.flush()
        return time.perf_counter() - t0

    def pingpong(self, n: int) -> float:
        mb = self.mb
        self.comm.Barrier()
        t0 = time.perf_counter()
        for i in range(n):
            if self.comm.rank == 0:
                mb.send(self.peer, Small(i, PAYLOAD))
                self._next()
            else:
                msg = self._next()
                mb.send(self.peer, Small(msg.seq, PAYLOAD))
        mb.flush()
        return time.perf_counter() - t0

    def large_one(self) -> float:
        mb = self.mb
        self.comm.Barrier()
        t0 = time.perf_counter()
        if self.comm.rank == 0:
            mb.send(self.peer, Large(0, self.large))
            assert isinstance(self._next(), Ack)
        else:
            msg = self._next()
            assert msg.data.nbytes == self.large_bytes_expected
            mb.send(self.peer, Ack(0))
        mb.flush()
        return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=9, help="timed repetitions per measurement (median taken)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of all measurements; medians and (min, max) reported")
    p.add_argument("--small", type=int, default=5_000, help="messages per small-message repetition")
    p.add_argument("--pings", type=int, default=1_000, help="round trips per latency repetition")
    p.add_argument("--large-mib", type=int, default=64, help="size of the large message")
    p.add_argument(
        "--cross-node", action="store_true", help="run (not under mpirun) with the ranks on two virtual nodes: TCP"
    )
    args = p.parse_args()

    world = MPI.COMM_WORLD
    if args.cross_node and world.size == 1:
        from cross_node import run_across_nodes

        sys.exit(run_across_nodes(__file__, 2, [1, 1], [a for a in sys.argv[1:] if a != "--cross-node"]))
    if world.size != 2:
        if world.rank == 0:
            print("bench/mailbox.py needs exactly 2 ranks: mpirun -n 2 python bench/mailbox.py", file=sys.stderr)
        sys.exit(2)
    large_bytes = args.large_mib << 20
    raw = Raw(world.Dup(), large_bytes)
    # Both contenders send the large message from the same memory. With an array each, the
    # ratio moved with which was allocated first: 0.84-0.88 with the raw contender's first,
    # 0.94-0.98 the other way round, the same code either way.
    box = Box(world.Dup(), raw.large)
    box.large_bytes_expected = large_bytes

    def measure(fn_raw, fn_box, reps):
        """Alternate the two; (median raw time, median mailbox time, median of paired raw/box)."""
        fn_raw(), fn_box()  # warm-up: first-touch pages, MPI connections, code paths
        t_raw, t_box = [], []
        for _ in range(reps):
            t_raw.append(fn_raw())
            t_box.append(fn_box())
        paired = statistics.median(r / b for r, b in zip(t_raw, t_box))
        return statistics.median(t_raw), statistics.median(t_box), paired

    def median_of(fn, reps):
        fn()
        return statistics.median(fn() for _ in range(reps))

    # --rounds rounds of the three measurements, one after another: a figure's median over the
    # rounds, and its (min, max), so one invocation shows how far the figures move.
    large_reps = max(args.reps, 11)  # each is ~0.1 s: more of them steady the median
    per_round = []
    for _ in range(args.rounds):
        small = measure(lambda: raw.small(args.small), lambda: box.small(args.small), args.reps)
        pp = measure(lambda: raw.pingpong(args.pings), lambda: box.pingpong(args.pings), args.reps)
        large = measure(raw.large_one, box.large_one, large_reps)
        per_round.append((small, pp, large))

    def med(i, j):
        return statistics.median(r[i][j] for r in per_round)

    def spread(i, fn):
        values = [fn(r[i]) for r in per_round]
        return [round(min(values), 3), round(max(values), 3)]

    raw_small, box_small, small_ratio = med(0, 0), med(0, 1), med(0, 2)
    raw_pp, box_pp, pp_ratio = med(1, 0), med(1, 1), med(1, 2)
    raw_large, box_large, large_ratio = med(2, 0), med(2, 1), med(2, 2)
    pickled_small = median_of(lambda: raw.small_pickled(args.small), max(3, args.reps // 2))
    fresh_large = median_of(lambda: raw.large_one(fresh=True), large_reps)
    box.mb.close(timeout_s=60)

    if world.rank == 0:
        out = {
            "bench": "mailbox",
            "ranks": world.size,
            "link": link(),
            "cores": os.cpu_count(),
            "yield_when_idle": box.yield_when_idle,  # both contenders' wait loops give the core away
            "transport": type(box.mb.transport).__name__,  # FastTransport: compiled (transports/choose.py)
            "load_avg_1m": round(os.getloadavg()[0], 2),  # a busy machine makes every figure noisy
            "reps": args.reps,
            "rounds": args.rounds,
            "small_payload_bytes": len(PAYLOAD),
            "small_messages": args.small,
            "pings": args.pings,
            "large_bytes": large_bytes,
            "mailbox_small_msgs_per_s": round(args.small / box_small),
            "raw_small_msgs_per_s": round(args.small / raw_small),
            "small_rate_ratio": round(small_ratio, 3),  # mailbox / raw, median of paired runs; target >= 0.5
            "small_rate_ratio_spread": spread(0, lambda m: m[2]),  # (min, max) over the rounds
            "mailbox_rtt_us": round(box_pp / args.pings * 1e6, 2),
            "raw_rtt_us": round(raw_pp / args.pings * 1e6, 2),
            "rtt_ratio": round(1 / pp_ratio, 3),  # mailbox / raw: how many times longer a round trip takes
            "rtt_ratio_spread": sorted(spread(1, lambda m: 1 / m[2])),
            "mailbox_large_gbps": round(large_bytes / box_large / 1e9, 3),
            "raw_large_gbps": round(large_bytes / raw_large / 1e9, 3),
            "large_bw_ratio": round(large_ratio, 3),  # mailbox / raw, median of paired runs; target >= 0.9
            "large_bw_ratio_spread": spread(2, lambda m: m[2]),
            # Context: mpi4py's pickled object messages, and raw receives into a fresh buffer
            # each time (the mailbox hands each message's memory to the application, so it
            # must allocate: fresh pages cost a fault and a zeroing each).
            "raw_pickle_small_msgs_per_s": round(args.small / pickled_small),
            "raw_fresh_buffer_large_gbps": round(large_bytes / fresh_large / 1e9, 3),
        }
        out["small_target_met"] = out["small_rate_ratio"] >= 0.5
        out["large_target_met"] = out["large_bw_ratio"] >= 0.9
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
