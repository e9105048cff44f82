"""Checkpoint save and load against the raw disk, in one run: one JSON line per size and layout.

    mpirun -n 2 python bench/checkpoint.py [--sizes 25M,100M,400M] [--reps 3] [--dir /tmp]

For the Llama-shaped models of ``bench/weight_sync.py`` (float32, untied head) with AdamW
state, each layout in turn:

- ``trainers: 1``: rank 0 holds the whole model and saves it alone;
- ``trainers: 2``: ranks 0-1 shard it with FSDP2 and each writes its own shards.

``save_s`` is ``roles.checkpoint.trainer_state.save_trainer_state`` (torch.distributed.checkpoint
with raw shard files written by direct I/O, ``roles.checkpoint.storage``), barrier to barrier;
``load_s`` its ``load_trainer_state`` into a fresh model and optimizer (from the disk: the
save's direct I/O leaves nothing in the page cache). ``bytes``
is what landed on disk. ``raw_s`` writes each writer's same tensors' bytes (same content: a
virtual disk may store zeros, such as fresh AdamW moments, faster than noise) as ``dd
oflag=direct conv=fsync bs=16M`` would: direct I/O, the disk's ceiling for that layout.
``save_over_raw`` is ``raw_s / save_s`` (1.0: as fast as the disk; the target is >= 0.5).
Medians of ``--reps`` rounds, alternating save, load and raw so drift hits all alike.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from roles.checkpoint.trainer_state import load_trainer_state, save_trainer_state  # noqa: E402
from roles.policy.sharding import shard_model  # noqa: E402
from transports.torch_dist import init_torch_distributed, new_group  # noqa: E402

# name -> (hidden, layers, intermediate, vocab), as in bench/weight_sync.py
SIZES = {"25M": (256, 10, 688, 32000), "100M": (768, 7, 2048, 32000), "400M": (1024, 26, 2816, 32000)}


def llama(hidden, layers, inter, vocab):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 64),
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def with_adam_state(model):
    """AdamW after a first step on random gradients: moments as full of data as a real run's."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opt.step()
    opt.zero_grad(set_to_none=True)
    return opt


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def local_tensors(model, opt) -> list[torch.Tensor]:
    """This rank's bytes of the state a checkpoint holds: parameter shards and AdamW moments."""
    from torch.distributed.tensor import DTensor

    local = [t.to_local() if isinstance(t, DTensor) else t for t in model.parameters()]
    for state in opt.state.values():
        local += [t.to_local() if isinstance(t, DTensor) else t for t in state.values() if t.dim() > 0]
    return [t.detach().contiguous() for t in local]


def raw_write(path: Path, tensors: list[torch.Tensor], block: int = 16 << 20) -> None:
    """The same bytes as the checkpoint, written the way ``dd oflag=direct conv=fsync bs=16M``
    writes: O_DIRECT from one page-aligned block buffer, then fsync. Direct I/O bypasses the
    page cache, so this is the disk's own speed for one writer (buffered writes of large
    buffers measured 2-4x slower than that on the CI-sized machine's virtual disk, so they
    are no ceiling). Same content, not zeros: a virtual disk may store zeros faster."""
    buf = mmap.mmap(-1, block)  # anonymous mmap: page-aligned, as O_DIRECT requires
    staged = memoryview(buf)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0), 0o644)
    try:
        filled = 0
        for t in tensors:
            data = memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else memoryview(b"")
            while data:
                n = min(block - filled, len(data))
                staged[filled : filled + n] = data[:n]
                filled, data = filled + n, data[n:]
                if filled == block:
                    os.write(fd, staged)
                    filled = 0
        if filled:  # the tail, padded to the 4 KiB O_DIRECT needs (the few extra bytes are noise)
            os.write(fd, staged[: -(-filled // 4096) * 4096])
        os.fsync(fd)
    finally:
        os.close(fd)
        staged.release()
        buf.close()


def timed(comm, active: bool, fn, *args) -> float:
    """Seconds from a barrier to the barrier after ``fn(*args)`` ran on the ``active`` ranks."""
    comm.Barrier()
    t0 = time.perf_counter()
    if active:
        fn(*args)
    comm.Barrier()
    return time.perf_counter() - t0


def run(comm, label: str, trainers: int, group, root: Path, reps: int) -> dict | None:
    rank = comm.Get_rank()
    mine = rank < trainers
    shape = SIZES[label]
    model = opt = fresh = fresh_opt = None
    if mine:
        model = llama(*shape)
        fresh = llama(*shape)
        if trainers > 1:
            model, fresh = shard_model(model, group), shard_model(fresh, group)
        opt, fresh_opt = with_adam_state(model), with_adam_state(fresh)
    g = group if trainers > 1 else None
    times: dict[str, list[float]] = {"save_s": [], "load_s": [], "raw_s": []}
    nbytes = 0
    for r in range(reps):
        ckpt = root / f"{label}-{trainers}-{r}"
        times["save_s"].append(timed(comm, mine, save_trainer_state, ckpt, model, opt, g))
        times["load_s"].append(timed(comm, mine, load_trainer_state, ckpt, fresh, fresh_opt, g))
        nbytes = comm.bcast(du(ckpt / "trainer") if rank == 0 else None, root=0)
        raw = root / f"raw-{rank}"
        times["raw_s"].append(timed(comm, mine, raw_write, raw, local_tensors(model, opt) if mine else []))
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(ckpt, ignore_errors=True)
        if mine:
            raw.unlink(missing_ok=True)
    if rank != 0:
        return None
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "bench": "checkpoint",
        "size": label,
        "params": sum(p.numel() for p in llama(*shape).parameters()),
        "trainers": trainers,
        "bytes": nbytes,
        **{k: round(v, 4) for k, v in med.items()},
        "save_gbps": round(nbytes / med["save_s"] / 1e9, 3),
        "load_gbps": round(nbytes / med["load_s"] / 1e9, 3),
        "raw_gbps": round(nbytes / med["raw_s"] / 1e9, 3),
        "save_over_raw": round(med["raw_s"] / med["save_s"], 3),
        "reps": reps,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="25M,100M,400M", help=f"comma list of {list(SIZES)}")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the checkpoints are written")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        if comm.Get_rank() == 0:
            print("bench/checkpoint.py needs exactly 2 ranks: mpirun -n 2 python bench/checkpoint.py", file=sys.stderr)
        sys.exit(2)
    if not Path(args.dir).is_dir():  # checked on every rank, before anything collective: no rank waits
        if comm.Get_rank() == 0:
            print(f"bench/checkpoint.py: --dir {args.dir} is not a folder", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(1)
    init_torch_distributed(comm, backend="gloo", timeout_s=600)
    group = new_group((0, 1))
    root = Path(
        comm.bcast(tempfile.mkdtemp(prefix="mpirl-ckpt-bench-", dir=args.dir) if comm.Get_rank() == 0 else None)
    )
    try:
        for label in args.sizes.split(","):
            for trainers in (1, 2):
                line = run(comm, label, trainers, group, root, args.reps)
                if line is not None:
                    print(json.dumps(line), flush=True)
    finally:
        comm.Barrier()
        if comm.Get_rank() == 0:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
