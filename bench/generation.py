"""Sampling throughput of the three ways a generator can decode, side by side, in one run.

vLLM (in-process ``vllm.LLM``, compiled, i.e. ``world.generator.compile: true``; and eager,
the CPU default, which starts a minute sooner), our torch engine (a hand-written KV-cache loop)
and Hugging Face ``model.generate(do_sample=True)`` sample from the same locally built ~25M-parameter
Llama (``BENCH_25M``), the same 64 prompts, 128 new tokens each. EOS is suppressed in all
three (vLLM ``ignore_eos``, torch/HF ``min_new_tokens``) so every one produces exactly
64 x 128 tokens; temperature 1, no top-p. One JSON line on stdout:

    {"vllm_tok_s": ..., "vllm_eager_tok_s": ..., "torch_tok_s": ..., "hf_generate_tok_s": ...,
     "vllm_over_hf": ..., "vllm_eager_over_hf": ..., "torch_over_hf": ..., ...}

Each engine is warmed up on a small batch, then timed ``--rounds`` times, the rounds
interleaved across engines so a burst of load on a shared machine hits all of them; the
best round counts. Rates are given per wall-clock second (``*_tok_s``) and per CPU-second
of the process (``*_tok_per_cpu_s``): with more runnable processes than cores (see
``load_avg_1m``) the wall-clock figures mostly measure the share of the CPU a run got.
All three run with the same number of torch/OpenMP threads (``--threads``; default
``OMP_NUM_THREADS``, else all cores), set before vLLM starts (it pins the count).

    python bench/generation.py [--batch 64] [--new-tokens 128] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch_vs_hf import hf_sample  # noqa: E402

from examples.toy.tiny_llama import BENCH_25M, build_tiny_llama  # noqa: E402
from roles.engines.base import SamplingConfig  # noqa: E402

ALPHABET = "0123456789+-*/=() abcdefghijklmnopqrstuvwxyz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    default_threads = int(os.environ.get("OMP_NUM_THREADS", 0)) or os.cpu_count()
    ap.add_argument("--threads", type=int, default=default_threads)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # vLLM keeps this count instead of dropping to 1
    torch.set_num_threads(args.threads)
    B, N = args.batch, args.new_tokens

    with tempfile.TemporaryDirectory(prefix="mpirl-bench-gen-") as tmp:
        model_dir = build_tiny_llama(tmp, ALPHABET, **BENCH_25M.kwargs(), seed=args.seed)
        runners, n_params, build_s = _runners(model_dir, args)
        rng = np.random.default_rng(args.seed)
        vocab = 3 + len(ALPHABET)
        prompts = [rng.integers(3, vocab, args.prompt_len).astype(np.int32) for _ in range(B)]

        for run in runners.values():  # warm-up: allocators, kernels, lazy initialisation
            run(prompts[:4], 8)
        wall: dict[str, float] = {}  # tokens per wall-clock second, best round
        cpu: dict[str, float] = {}  # tokens per CPU-second of this process, best round
        for _ in range(args.rounds):
            for name, run in runners.items():
                t0, c0 = time.perf_counter(), time.process_time()
                tokens = run(prompts, N)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                if tokens != B * N:
                    raise RuntimeError(f"{name} produced {tokens} tokens, expected {B * N}")
                wall[name] = max(wall.get(name, 0.0), tokens / dt)
                cpu[name] = max(cpu.get(name, 0.0), tokens / dc)

    result = {
        "bench": "generation",
        "model": "BENCH_25M",
        "params_m": round(n_params / 1e6, 2),
        "batch": B,
        "new_tokens": N,
        "prompt_len": args.prompt_len,
        "threads": args.threads,
        "rounds": args.rounds,
        "stat": "best round",
        "vllm_tok_s": round(wall["vllm"], 1),
        "vllm_eager_tok_s": round(wall["vllm_eager"], 1),
        "torch_tok_s": round(wall["torch"], 1),
        "hf_generate_tok_s": round(wall["hf_generate"], 1),
        "vllm_over_hf": round(wall["vllm"] / wall["hf_generate"], 3),
        "vllm_eager_over_hf": round(wall["vllm_eager"] / wall["hf_generate"], 3),
        "torch_over_hf": round(wall["torch"] / wall["hf_generate"], 3),
        "vllm_over_torch": round(wall["vllm"] / wall["torch"], 3),
        # Per CPU-second: what a core of its own would give. On a shared machine (load above
        # the core count) wall-clock rates mostly measure the share of the CPU each run got.
        "vllm_tok_per_cpu_s": round(cpu["vllm"], 1),
        "torch_tok_per_cpu_s": round(cpu["torch"], 1),
        "hf_generate_tok_per_cpu_s": round(cpu["hf_generate"], 1),
        "vllm_over_hf_cpu": round(cpu["vllm"] / cpu["hf_generate"], 3),
        "vllm_eager_over_hf_cpu": round(cpu["vllm_eager"] / cpu["hf_generate"], 3),
        "torch_over_hf_cpu": round(cpu["torch"] / cpu["hf_generate"], 3),
        "vllm_build_s": round(build_s["vllm"], 1),  # includes torch.compile
        "vllm_eager_build_s": round(build_s["vllm_eager"], 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
    }
    print(json.dumps(result), flush=True)


def _runners(model_dir: Path, args):
    """name -> run(prompts, new_tokens) -> tokens produced, each with EOS suppressed."""
    from transformers import AutoModelForCausalLM

    from roles.engines.torch_engine import TorchEngine
    from roles.engines.vllm_engine import VllmEngine

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    n_params = sum(p.numel() for p in model.parameters())
    torch_engine = TorchEngine(model)  # shares the HF model's weights
    engines, build_s = {}, {}
    for name, eager in (("vllm", False), ("vllm_eager", True)):
        t0 = time.perf_counter()
        engines[name] = VllmEngine(
            VllmEngine.Config(
                model=str(model_dir),
                max_num_seqs=args.batch,
                kv_cache_gib=0.5,
                cpu_threads=args.threads,
                seed=args.seed,
                compile=not eager,
            )
        )
        build_s[name] = time.perf_counter() - t0

    def sampling(new_tokens: int) -> SamplingConfig:
        return SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=new_tokens)

    def vllm_runner(engine):
        def run(prompts, new_tokens):
            out = engine.generate(prompts, n=1, sampling=sampling(new_tokens), ignore_eos=True)
            return sum(len(g[0].response_ids) for g in out)

        return run

    def run_torch(prompts, new_tokens):
        # min_new_tokens = new_tokens: EOS banned throughout (as torch_vs_hf.bench_vs_hf_generate).
        out = torch_engine._sample(list(prompts), sampling(new_tokens), None, new_tokens)
        return sum(len(s.response_ids) for s in out)

    def run_hf(prompts, new_tokens):
        return hf_sample(model, torch.as_tensor(np.stack(prompts), dtype=torch.long), new_tokens, torch_engine.pad_id)

    runners = {name: vllm_runner(engine) for name, engine in engines.items()}
    return runners | {"torch": run_torch, "hf_generate": run_hf}, n_params, build_s


if __name__ == "__main__":
    main()
