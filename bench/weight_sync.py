"""Direct shard-to-generator weight sync vs gather+broadcast vs a raw transfer, in one run.

    mpirun -n 4 python bench/weight_sync.py [--sizes 25M,100M,400M] [--dtype float32]
                                            [--bucket-mib 64] [--reps N] [--no-mpi]

Ranks 0-1 are trainers, each holding the dim-0 (FSDP2-style) shards of a synthetic
Llama-shaped model; ranks 2-3 are generators that need the full weights. Per model size, the
median seconds of one sync, barrier to barrier, for:

- direct_s: the transfer plan over torch.distributed (gloo on CPU), as a trainer runs it with
  ``WeightSender(copy=False)``: whole-row pieces go straight from the parameters' memory, small
  ones are packed into flat buckets; generators receive in place (``guard(optimizer)`` makes
  the next optimizer step wait for the sends).
- direct_copy_s: the same plan with ``copy=True`` (the default): the trainer first copies its
  shards into flat buckets, so it may change its parameters as soon as ``push`` returns.
- gather_bcast_s: the baseline the plan avoids: trainer 1 sends its shards to trainer 0,
  trainer 0 assembles the full model, then broadcasts it to the generators in buckets.
- raw_s: the same bytes as direct (each trainer's shard to each generator) as one flat
  isend/irecv per trainer-generator pair: no plan, no packing, no buckets. The ceiling.
- direct_mpi_s (unless --no-mpi): the same plan over MPI buffers (mpi4py, numpy views), and
  raw_mpi_s, the raw transfer over MPI (one ``Isend`` per trainer-generator pair): the ceiling
  of that transport (``raw_bw_ratio_mpi``).

Generators post their receives before the clock starts, as ``GeneratorActor`` does (it posts
the next version's receives as soon as it has loaded the current one); raw and the MPI
contenders get the same head start, so the ceiling stays the ceiling. Gather+broadcast cannot
post ahead: broadcasts are collectives. Repetitions alternate between the contenders so that
drift on a shared machine hits all alike; figures are medians, ``min_s`` holds each
contender's best round and ``loadavg_1m`` the machine's load when the size started. Prints
one JSON line per size on rank 0. Sizes that would not fit in memory are reported as skipped.
GB/s are 10^9 bytes per second of payload received by the generators.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from cross_node import link  # noqa: E402
from model_sizes import SIZES  # noqa: E402
from mpi4py import MPI  # noqa: E402

from transports.torch_dist import init_torch_distributed, new_group  # noqa: E402
from transports.weights import MPIChannel, Need, TorchChannel, WeightReceiver, WeightSender, build_plan  # noqa: E402  # noqa: E402
from transports.weights.plan import LocalShard, ShardMeta, chunk_range, layout, typed_view  # noqa: E402

TRAINERS, GENERATORS = (0, 1), (2, 3)


def llama_shapes(hidden, layers, inter, vocab):
    out = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", (hidden, hidden)),
            (p + "self_attn.k_proj.weight", (hidden, hidden)),
            (p + "self_attn.v_proj.weight", (hidden, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, hidden)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
            (p + "input_layernorm.weight", (hidden,)),
            (p + "post_attention_layernorm.weight", (hidden,)),
        ]
    return out + [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


class Bench:
    def __init__(self, args):
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.args = args
        self.dtype = getattr(torch, args.dtype)
        self.itemsize = torch.empty((), dtype=self.dtype).element_size()
        init_torch_distributed(self.comm, backend="gloo", timeout_s=600)
        # Collective over the whole world, in this order on every rank.
        self.bcast_group = new_group((0,) + GENERATORS)
        self.is_trainer = self.rank in TRAINERS
        self.mpi_comm = self.comm.Dup()

    def run_size(self, label):
        shapes = llama_shapes(*SIZES[label])
        n_params = sum(torch.Size(s).numel() for _, s in shapes)
        model_bytes = n_params * self.itemsize
        base = {
            "params": n_params,
            "size": label,
            "dtype": self.args.dtype,
            "link": link(),
            "loadavg_1m": round(os.getloadavg()[0], 1),
        }  # a shared machine shows here
        # Peak on this node, in model copies: trainer 0 holds its half, a half of send buckets,
        # the other half and the full model (2.5); trainer 1 its half and buckets (1); each
        # generator a staging copy and a flat full copy (2 each).
        need = 7.5 * model_bytes
        avail = self.comm.bcast(mem_available() if self.rank == 0 else None, root=0)
        if need > 0.85 * avail:
            return {
                **base,
                "skipped": f"needs about {need / 2**30:.1f} GiB on this node, {avail / 2**30:.1f} GiB available",
            }

        # Trainer t holds rows chunk_range(rows, 2, t) of every parameter (FSDP2's split).
        meta = {t: [ShardMeta(n, s, self.args.dtype, *chunk_range(s[0], 2, t)) for n, s in shapes] for t in TRAINERS}
        bucket = self.args.bucket_mib << 20
        # As the transport does: its CPU default per generator, or exactly what was asked for.
        pack_below = (
            {"pack_below_per_peer": True}
            if self.args.pack_below_kib is None
            else {"pack_below": self.args.pack_below_kib << 10}
        )
        plan = build_plan(meta, {g: Need() for g in GENERATORS}, bucket_bytes=bucket, **pack_below)
        # Small syncs are cheap and noisy: give them more rounds (25M float32: 15).
        reps = self.args.reps or max(5, min(25, round(1.5e9 / model_bytes)))
        full_offs, full_total = layout(torch.Size(s).numel() * self.itemsize for _, s in shapes)
        shard_bytes = [plan.nbytes_from(tr) // len(GENERATORS) for tr in TRAINERS]

        if self.is_trainer:  # each trainer's shards live in one flat buffer (raw sends it whole)
            t = TRAINERS.index(self.rank)
            flats = []
            for tr in TRAINERS:
                rows = [chunk_range(s[0], 2, tr) for _, s in shapes]
                offs, total = layout(
                    (b - a) * torch.Size(s[1:]).numel() * self.itemsize for (a, b), (_, s) in zip(rows, shapes)
                )
                flats.append((rows, offs, total))
            rows, offs, total = flats[t]
            local_flat = torch.empty(total, dtype=torch.uint8)
            shards = []
            for i, ((name, shape), (a, b), off) in enumerate(zip(shapes, rows, offs)):
                view = typed_view(local_flat, off, self.dtype, (b - a,) + tuple(shape[1:]))
                view.fill_(float(2 * i + t))  # checked on arrival
                shards.append(LocalShard(name, view, shape, a))
            full = torch.empty(full_total, dtype=torch.uint8) if self.rank == 0 else None
            other = torch.empty(flats[1][2], dtype=torch.uint8) if self.rank == 0 else None
        else:
            full = torch.empty(full_total, dtype=torch.uint8)
        version = [0]
        posted = []  # raw receives, posted ahead

        def post_direct(ep):
            version[0] += 1
            if not self.is_trainer:
                ep.start(version[0])

        def direct(ep):
            if self.is_trainer:
                ep.push(shards, version[0])
                ep.wait()
            else:
                out = ep.finish()
                return lambda: self.check(dict(out), shapes)  # after the clock stops

        def gather_bcast():
            if self.rank == 1:
                dist.send(local_flat, dst=0)
            elif self.rank == 0:
                dist.recv(other, src=1)
                for i, (_, shape) in enumerate(shapes):  # assemble the full model
                    dst = typed_view(full, full_offs[i], self.dtype, shape)
                    for tr, flat in enumerate((local_flat, other)):
                        (a, b), off = flats[tr][0][i], flats[tr][1][i]
                        dst[a:b].copy_(typed_view(flat, off, self.dtype, (b - a,) + tuple(shape[1:])))
            if self.rank in (0,) + GENERATORS:
                works = [
                    dist.broadcast(full[i : i + bucket], src=0, group=self.bcast_group, async_op=True)
                    for i in range(0, full_total, bucket)
                ]
                for w in works:
                    w.wait()

        def post_raw():
            if not self.is_trainer:
                posted[:] = [
                    dist.irecv(full[: shard_bytes[0]], src=0),
                    dist.irecv(full[shard_bytes[0] : sum(shard_bytes)], src=1),
                ]

        def raw():
            if self.is_trainer:
                flat = local_flat[: shard_bytes[TRAINERS.index(self.rank)]]
                posted[:] = [dist.isend(flat, dst=g) for g in GENERATORS]
            for w in posted:
                w.wait()

        def post_raw_mpi():
            if not self.is_trainer:
                buf = full.numpy()
                posted[:] = [
                    self.mpi_comm.Irecv(buf[: shard_bytes[0]], source=0, tag=7),
                    self.mpi_comm.Irecv(buf[shard_bytes[0] : sum(shard_bytes)], source=1, tag=7),
                ]

        def raw_mpi():
            if self.is_trainer:
                flat = local_flat[: shard_bytes[TRAINERS.index(self.rank)]].numpy()
                posted[:] = [self.mpi_comm.Isend(flat, dest=g, tag=7) for g in GENERATORS]
            MPI.Request.Waitall(posted)

        def endpoint(channel, copy=True):
            if self.is_trainer:
                return WeightSender(plan, channel, copy=copy)
            return WeightReceiver(plan, channel)

        ep, ep_copy = endpoint(TorchChannel(), copy=False), endpoint(TorchChannel())
        if not self.is_trainer:
            ep_copy = ep  # a receiver does not care how the trainer sends
        times = self.timed(
            {
                "direct_s": (lambda: post_direct(ep), lambda: direct(ep)),  # noqa: F821
                "direct_copy_s": (lambda: post_direct(ep_copy), lambda: direct(ep_copy)),  # noqa: F821
                "gather_bcast_s": (None, gather_bcast),
                "raw_s": (post_raw, raw),
            },
            reps,
        )
        post = self.comm.gather(ep_copy.stats.post_s if self.is_trainer else 0.0, root=0)
        stall = self.comm.gather(0.0 if self.is_trainer else ep.stats.stall_s, root=0)
        del ep, ep_copy
        gc.collect()
        if self.args.mpi:  # after the others, to keep one staging copy in memory at a time
            ep_mpi = endpoint(MPIChannel(self.mpi_comm), copy=False)
            times.update(
                self.timed(
                    {
                        "direct_mpi_s": (lambda: post_direct(ep_mpi), lambda: direct(ep_mpi)),
                        "raw_mpi_s": (post_raw_mpi, raw_mpi),
                    },
                    reps,
                )
            )
            del ep_mpi

        med = {k: statistics.median(v) for k, v in times.items()}
        recv_bytes = plan.nbytes_to(GENERATORS[0]) * len(GENERATORS)
        out = {
            **base,
            **{k: round(v, 4) for k, v in med.items()},
            "raw_bw_ratio": round(med["raw_s"] / med["direct_s"], 3),
            "raw_bw_ratio_copy": round(med["raw_s"] / med["direct_copy_s"], 3),
            "speedup_vs_gather_bcast": round(med["gather_bcast_s"] / med["direct_s"], 3),
            "direct_gbps": round(recv_bytes / med["direct_s"] / 1e9, 3),
            "raw_gbps": round(recv_bytes / med["raw_s"] / 1e9, 3),
        }
        if "direct_mpi_s" in med:
            out["direct_mpi_gbps"] = round(recv_bytes / med["direct_mpi_s"] / 1e9, 3)
            out["raw_bw_ratio_mpi"] = round(med["raw_mpi_s"] / med["direct_mpi_s"], 3)
        # best rounds: what each contender does when the machine's other load leaves it alone
        out["min_s"] = {k.removesuffix("_s"): round(min(v), 4) for k, v in times.items()}
        if self.rank == 0:
            out.update(
                {
                    "copy_mode_pack_post_s": round(max(post), 4),
                    "generator_stall_s": round(max(stall), 4),
                    "bytes_per_sync": recv_bytes,
                    "bucket_mib": self.args.bucket_mib,
                    "buckets_per_trainer": len(plan.sends(0)),
                    "reps": reps,
                }
            )
        return out

    def timed(self, contenders, reps):
        """Seconds per call of each contender over ``reps`` rounds, barrier to barrier; rounds
        alternate contenders.

        A contender is ``(post, run)``: ``post`` (or None) posts the receives before the clock
        starts; ``run`` may return a check of what it received, which runs after the clock
        stops (raw and gather+broadcast are not checked, so the direct plan is not charged).
        """
        times = {k: [] for k in contenders}
        for rep in range(reps + 1):  # the first round warms up and is dropped
            for key, (post, fn) in contenders.items():
                if post is not None:
                    post()
                self.comm.Barrier()
                t0 = time.perf_counter()
                verify = fn()
                self.comm.Barrier()
                if rep:
                    times[key].append(time.perf_counter() - t0)
                if verify is not None:
                    verify()
        # every rank saw the same barriers; rank 0's clock decides
        return self.comm.bcast(times, root=0)

    def check(self, out, shapes):
        """The received rows carry the value the trainer that owns them wrote."""
        for i, (name, shape) in enumerate(shapes):
            t = out[name]
            for tr in TRAINERS:
                a, b = chunk_range(shape[0], 2, tr)
                if a < b and not (float(t[a].reshape(-1)[0]) == float(t[b - 1].reshape(-1)[-1]) == float(2 * i + tr)):
                    raise AssertionError(f"{name}: rows [{a},{b}) did not come from trainer {tr}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="25M,100M,400M", help=f"comma list of {list(SIZES)}")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--bucket-mib", type=int, default=64)
    ap.add_argument(
        "--reps",
        type=int,
        default=None,
        help="rounds per size (default: about 1.5 GB of model per contender, 5 to 25: "
        "small syncs take milliseconds and vary by 20%% round to round here)",
    )
    ap.add_argument(
        "--pack-below-kib",
        type=int,
        default=None,
        help="pieces smaller than this share flat messages (default: the CPU default)",
    )
    ap.add_argument("--no-mpi", dest="mpi", action="store_false", help="skip the MPI-buffer transport")
    ap.add_argument(
        "--cross-node",
        action="store_true",
        help="run (not under mpirun) with the trainers on one virtual node, the generators on another: TCP",
    )
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    if args.cross_node and comm.Get_size() == 1:
        from cross_node import run_across_nodes

        sys.exit(run_across_nodes(__file__, 4, [2, 2], [a for a in sys.argv[1:] if a != "--cross-node"]))
    if comm.Get_size() != 4:
        if comm.Get_rank() == 0:
            print(
                "bench/weight_sync.py needs 4 ranks (2 trainers, 2 generators): "
                "mpirun -n 4 python bench/weight_sync.py",
                file=sys.stderr,
            )
        sys.exit(2)
    torch.set_num_threads(1)
    bench = Bench(args)
    for label in args.sizes.split(","):
        out = bench.run_size(label.strip())
        if bench.rank == 0:
            print(json.dumps(out), flush=True)
        gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
