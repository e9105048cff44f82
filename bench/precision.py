"""Generator precision side by side: float32, bfloat16 and int8 generators of a float32 trainer.

One JSON line per model and configuration (``trainer_dtype``/``generator_dtype``/``quantization``):

- ``model: demo`` — the CPU demo's RL job (examples/arith/async.yaml, its warm-started tiny
  Llama) for ``--steps`` steps at ``max_staleness: 0``, so that the gap between the trainer's
  pi and the generator's mu is the precision's alone. ``gen_tok_s``: response tokens per
  second inside the engine; ``sync_bytes``/``sync_s``: the trainers' payload per weight sync
  and the step's weight-sync seconds (medians); ``logp_mismatch_mean``: mean |log pi - log mu|
  on the sampled tokens; ``clip_share``: share of tokens whose ratio pi/mu was clipped at rho;
  ``final_reward``: the mean training reward of the last 20 steps.
- ``model: 25M`` — the Llama-shaped 25M model of ``bench/weight_sync.py`` (random weights, no
  task: ``final_reward`` is null) on 2 ranks: one float32 trainer, one generator. A sync is
  the real transport (gloo) from ``push`` to the engine's ``load_weights`` (quantization
  included), median of 5; generation is a batch of random prompts; the mismatch compares
  the generator's mu with the trainer's float32 log-probs of the same tokens.

    python bench/precision.py [--steps 60] [--out runs/bench_precision]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIGS = [("float32", None), ("bfloat16", None), ("float32", "int8")]  # generator dtype, quantization
TRAINER_DTYPE = "float32"


def demo_line(model_dir: Path, out: Path, steps: int, dtype: str, quantization: str | None) -> dict:
    from launch import recipe

    name = f"{dtype}-{quantization or 'none'}"
    generator = {"ranks": 1, "dtype": dtype, "quantization": quantization}
    overrides = {
        "model": {"path": str(model_dir), "dtype": TRAINER_DTYPE},
        "world": {"generator": generator},
        "run": {"steps": steps, "max_staleness": 0, "out": str(out / name), "progress": False},
    }
    cfg = recipe.write_config(REPO / "examples/arith/async.yaml", out / name, overrides)
    recipe.run_job(cfg, timeout_s=1800, quiet=True)
    metrics = recipe.read_metrics(out / name)
    warm = metrics[3:]
    pushing = [m for m in warm if m["weight_sync_bytes"]]
    trained = [m["trainer"] for m in metrics if "logp_mismatch_mean" in m["trainer"]]
    return {
        "bench": "precision",
        "model": "demo",
        "trainer_dtype": TRAINER_DTYPE,
        "generator_dtype": dtype,
        "quantization": quantization,
        "steps": steps,
        "gen_tok_s": round(sum(m["tokens"] for m in warm) / sum(m["generation_s"] for m in warm), 1),
        "sync_bytes": int(statistics.median(m["weight_sync_bytes"] for m in pushing)),
        "sync_s": round(statistics.median(m["weight_sync_s"] for m in pushing), 5),
        # steps whose groups all scored alike train nothing and have no token figures
        "logp_mismatch_mean": round(statistics.fmean(t["logp_mismatch_mean"] for t in trained), 6),
        "clip_share": round(statistics.fmean(t["clip_frac"] for t in trained), 6),
        "final_reward": round(statistics.fmean(m["reward_mean"] for m in metrics[-20:]), 4),
    }


def probe_25m(dtype: str, quantization: str | None) -> None:
    """Under ``mpiexec -n 2``: rank 0 a float32 trainer of the 25M model, rank 1 a generator."""
    import numpy as np
    import torch
    from mpi4py import MPI

    from bench.checkpoint import SIZES, llama
    from roles.algorithm.logprobs import response_logprobs
    from roles.engines.base import SamplingConfig
    from roles.engines.torch_engine import TorchEngine
    from roles.policy.sharding import local_shards
    from transports.torch_dist import init_torch_distributed, new_group
    from transports.weights import Need, make_weight_transport

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    init_torch_distributed(comm)
    group = new_group([0, 1])
    model = llama(*SIZES["25M"])  # the same random weights on both ranks (seeded)
    engine = None
    if rank == 1:
        engine = TorchEngine(model, dtype=getattr(torch, dtype), quantization=quantization)
        model = None
    wanted = None if dtype == TRAINER_DTYPE else dtype
    ep = make_weight_transport(
        "torch",
        comm,
        shards=local_shards(model) if rank == 0 else None,
        need=Need(dtype=wanted) if rank == 1 else None,
        group=group,
        copy=False,
    )
    sync_s = []
    for version in range(1, 6):
        comm.Barrier()
        t0 = time.perf_counter()
        if rank == 1:
            ep.start(version)
        comm.Barrier()  # receives posted before the push, as the generator role does
        if rank == 0:
            ep.push(local_shards(model), version)
            ep.wait()
        else:
            engine.load_weights(ep.finish())
        comm.Barrier()
        sync_s.append(time.perf_counter() - t0)
    rng = np.random.default_rng(0)
    vocab = SIZES["25M"][3]
    prompts = [rng.integers(3, vocab, size=16).astype(np.int32) for _ in range(16)]
    result = None
    if rank == 1:
        sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=32, seed=1)
        engine.generate(prompts[:2], 1, sampling)  # warm-up
        t0 = time.perf_counter()
        groups = engine.generate(prompts, 4, sampling)
        gen_s = time.perf_counter() - t0
        samples = [s for g in groups for s in g]
        tokens = sum(len(s.response_ids) for s in samples)
        comm.send(([s.response_ids for s in samples], [s.logprobs for s in samples]), dest=0)
        comm.send({"gen_tok_s": tokens / gen_s, "sync_bytes": ep.stats.nbytes}, dest=0)
    else:
        responses, mus = comm.recv(source=1)
        facts = comm.recv(source=1)
        rows = [p for p in prompts for _ in range(4)]
        with torch.no_grad():
            logp, mask = response_logprobs(model, rows, responses, 1.0)
        mu = torch.zeros_like(logp)
        for i, m in enumerate(mus):
            mu[i, : len(m)] = torch.from_numpy(m)
        gap = (logp - mu)[mask]
        result = {
            "bench": "precision",
            "model": "25M",
            "trainer_dtype": TRAINER_DTYPE,
            "generator_dtype": dtype,
            "quantization": quantization,
            "gen_tok_s": round(facts["gen_tok_s"], 1),
            "sync_bytes": int(facts["sync_bytes"]),
            "sync_s": round(statistics.median(sync_s), 4),
            "logp_mismatch_mean": round(gap.abs().mean().item(), 6),
            "clip_share": round((gap.exp() > 4.0).float().mean().item(), 6),  # AIPO's default rho
            "final_reward": None,
        }
        print(json.dumps(result), flush=True)


def run_probe(dtype: str, quantization: str | None) -> dict:
    from launch.cli import mpiexec_command

    args = [sys.executable, str(Path(__file__).resolve()), "--probe", dtype, quantization or "none"]
    cmd, env = mpiexec_command(2, args)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"the 25M probe failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"bench"')))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="runs/bench_precision")
    parser.add_argument("--models", default="demo,25M")
    parser.add_argument("--probe", nargs=2, metavar=("DTYPE", "QUANTIZATION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        dtype, quant = args.probe
        probe_25m(dtype, None if quant == "none" else quant)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    models = args.models.split(",")
    if "demo" in models:
        from examples.arith import prepare as arith

        out = Path(args.out)
        arith.prepare_model(out / "model", seed=0)
        for dtype, quant in CONFIGS:
            print(json.dumps(demo_line(out / "model" / "sft", out, args.steps, dtype, quant)), flush=True)
    if "25M" in models:
        for dtype, quant in CONFIGS:
            print(json.dumps(run_probe(dtype, quant)), flush=True)


if __name__ == "__main__":
    main()
