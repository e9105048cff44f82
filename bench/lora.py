"""LoRA against full fine-tuning, side by side in one run: one JSON line per model size.

    python bench/lora.py [--sizes 25M,100M] [--rank 16] [--steps 5] [--batch 2] [--seq 64] [--repeats 3]
                          [--demo-steps 0]

For each synthetic Llama of bench/weight_sync.py (random weights, float32) and each mode
(``full``: every weight trained; ``lora``: ``model.lora`` with ``rank``, all linear layers),
a fresh process measures:

- ``step_s``: one trainer step (forward, backward, AdamW) on a batch of ``--batch`` rows of
  ``--seq`` tokens, median of ``--steps`` after a warm-up step;
- ``peak_rss_mb``: the process's peak resident memory after those steps (model, gradients,
  optimizer state, activations);
- ``sync_bytes``: what a weight sync moves (every parameter, or the adapters only);
- ``sync_s``: that payload through a raw gloo send between two processes on this host, plus
  the torch engine's ``load_weights`` of it at the receiving end (median of 3): the transfer
  and apply a generator pays, without the plan's packing (bench/weight_sync.py measures that).

Each mode is measured ``--repeats`` times, full and LoRA interleaved (full, lora, full, lora,
...: a drift in the machine's load touches both alike); each figure is the median of the
repeats, with ``<figure>_min`` and ``<figure>_max`` beside it. Ratios ``lora_over_full`` of the
medians for each. ``--demo-steps N`` also runs the arith demo job
(examples/arith/async.yaml, N steps) full and with LoRA (lr ``--lora-lr``) and reports their
final training reward (mean of the last 10 steps) and held-out accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from model_sizes import SIZES, llama_config  # noqa: E402


def build(size: str, lora_rank: int):
    """The synthetic Llama of ``size`` (random weights), with adapters if ``lora_rank``."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    cfg = llama_config(size)
    model = LlamaForCausalLM(cfg)
    if lora_rank:
        from roles.models.lora import LoraConfig, inject_lora

        inject_lora(model, LoraConfig(rank=lora_rank, alpha=2.0 * lora_rank))
    return model


def sync_payload(model, lora: bool) -> dict:
    from roles.models.lora import is_adapter

    return {n: p.detach() for n, p in model.named_parameters() if not lora or is_adapter(n)}


def measure_training(size: str, lora_rank: int, steps: int, batch: int, seq: int) -> dict:
    """In this (fresh) process: the step time and the peak memory of training."""
    import torch

    model = build(size, lora_rank)
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-5)
    ids = torch.randint(0, SIZES[size][3], (batch, seq))
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first is a warm-up
            times.append(time.perf_counter() - t0)
    payload = sync_payload(model, bool(lora_rank))
    return {
        "step_s": statistics.median(times),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "trained_params": sum(p.numel() for p in trained),
        "sync_bytes": sum(t.numel() * t.element_size() for t in payload.values()),
    }


def _sync_worker(rank: int, size: str, lora_rank: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = build(size, lora_rank)
    payload = sync_payload(model, bool(lora_rank))
    flat = torch.cat([t.reshape(-1) for t in payload.values()])
    engine = None
    if rank == 1:
        from roles.engines.torch_engine import TorchEngine

        engine = TorchEngine(model, capacity=4)
    times = []
    for _ in range(3):
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(flat, dst=1)
        else:
            got = torch.empty_like(flat)
            dist.recv(got, src=0)
            views, offset = [], 0
            for name, t in payload.items():
                views.append((name, got[offset : offset + t.numel()].view_as(t)))
                offset += t.numel()
            engine.load_weights(views)
        dist.barrier()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(json.dumps({"sync_s": statistics.median(times)}))
    dist.destroy_process_group()


def measure_sync(size: str, lora_rank: int) -> dict:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(f"/tmp/bench-lora-sync-{os.getpid()}.json")
    mp.spawn(_sync_worker, args=(size, lora_rank, port, str(out)), nprocs=2, join=True)
    result = json.loads(out.read_text())
    out.unlink()
    return result


def one_mode(args, size: str, lora_rank: int) -> dict:
    """Training figures from a fresh process (so its peak memory is its own), then the sync."""
    cmd = [sys.executable, __file__, "--_train", size, str(lora_rank), str(args.steps), str(args.batch), str(args.seq)]
    train = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    return {**train, **measure_sync(size, lora_rank)}


def summarize(runs: list[dict]) -> dict:
    """The repeats of one mode: each timed or measured figure's median, min and max; the
    counts (the same every time) as they are."""
    out = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if key in ("trained_params", "sync_bytes"):
            out[key] = values[0]
            continue
        out[key] = round(statistics.median(values), 5)
        out[f"{key}_min"], out[f"{key}_max"] = round(min(values), 5), round(max(values), 5)
    return out


def compare(full: dict, lora: dict) -> dict:
    keys = ("step_s", "peak_rss_mb", "sync_bytes", "sync_s")
    return {k: round(lora[k] / full[k], 4) for k in keys if full.get(k)}


def demo(steps: int, lora_lr: float, rank: int) -> dict:
    """The arith demo job, full and LoRA, at equal steps: final training reward and held-out accuracy."""
    from examples.arith import prepare as arith
    from launch import recipe

    root = Path("runs/bench_lora")
    if not (root / "sft").exists():
        arith.prepare_model(root, seed=0)
    out = {}
    for mode, extra in (("full", {}), ("lora", {"model": {"lora": {"rank": rank}}, "algorithm": {"lr": lora_lr}})):
        run_dir = root / mode
        overrides = recipe.merge_overrides(
            {"model": {"path": str(root / "sft")}, "run": {"steps": steps, "out": str(run_dir), "progress": False}},
            extra,
        )
        cfg = recipe.write_config(HERE.parent / "examples/arith/async.yaml", run_dir, overrides)
        wall = recipe.run_job(cfg, quiet=True)
        summary = json.loads((run_dir / "summary.json").read_text())
        out[mode] = {
            "train_reward_last10": summary["train_reward_last10"],
            "heldout_acc": arith.heldout_accuracy(run_dir / "policy", seed=0),
            "wall_s": round(wall, 1),
        }
    out["reward_lora_minus_full"] = round(out["lora"]["train_reward_last10"] - out["full"]["train_reward_last10"], 4)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_train":  # the child process of one_mode
        size, rank, steps, batch, seq = sys.argv[2], *map(int, sys.argv[3:7])
        print(json.dumps(measure_training(size, rank, steps, batch, seq)))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="25M,100M", help=f"comma list of {list(SIZES)}")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank")
    ap.add_argument("--steps", type=int, default=5, help="timed trainer steps per mode")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each mode (medians, min, max)")
    ap.add_argument("--demo-steps", type=int, default=0, help="also run the arith demo full and LoRA (0: no)")
    ap.add_argument("--lora-lr", type=float, default=3e-4, help="the demo's LoRA learning rate")
    args = ap.parse_args()
    for size in filter(None, args.sizes.split(",")):
        runs: dict[str, list[dict]] = {"full": [], "lora": []}
        for _ in range(args.repeats):  # interleaved: full, lora, full, lora, ...
            runs["full"].append(one_mode(args, size, 0))
            runs["lora"].append(one_mode(args, size, args.rank))
        full, lora = summarize(runs["full"]), summarize(runs["lora"])
        line = {"bench": "lora", "size": size, "rank": args.rank, "repeats": args.repeats, "full": full, "lora": lora}
        line["lora_over_full"] = compare(full, lora)
        line["loadavg_1m"] = os.getloadavg()[0]
        print(json.dumps(line), flush=True)
    if args.demo_steps:
        print(
            json.dumps(
                {"bench": "lora_demo", "steps": args.demo_steps, **demo(args.demo_steps, args.lora_lr, args.rank)}
            )
        )


if __name__ == "__main__":
    main()
