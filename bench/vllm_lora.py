"""A LoRA run's vLLM generator, both ways it takes the adapters: one JSON line per size and mode.

    python bench/vllm_lora.py [--sizes 25M] [--rank 16] [--syncs 5] [--prompts 8] [--tokens 64] [--repeats 3]

``native`` is vLLM's own LoRA (``world.generator.lora_mode: native``, roles/engines/vllm_lora.py:
the adapters written as a PEFT folder and loaded into its adapter slot in place); ``merged`` is
the adapters merged into a CPU copy of the base and every weight reloaded
(roles/engines/adapter_merge.py). For the synthetic Llama of ``size`` (bench/model_sizes.py,
float32, random weights and adapters) each mode, in a fresh process of its own, reports:

- ``sync_s``: ``VllmEngine.load_weights`` of one sync's adapters (median over ``--syncs``);
- ``tokens_per_s``: ``--prompts`` prompts x ``--tokens`` new tokens (EOS ignored) over the
  time of one ``generate`` (median over ``--syncs``, one after each sync);
- ``logp_gap_max``: the largest |engine - trainer| log-prob over every sampled token, the
  trainer being the PEFT model with the same adapters (float32);
- ``load_s``: the engine's start (with LoRA slots or the merge copy of the base).

Modes run interleaved (native, merged, native, ...) ``--repeats`` times; each figure is the
median with ``_min`` and ``_max``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from model_sizes import SIZES, llama_config  # noqa: E402


def write_model(size: str, out: Path) -> Path:
    """The synthetic Llama of ``size`` as a model folder vLLM loads (with a small tokenizer)."""
    import torch
    from transformers import LlamaForCausalLM

    from examples.arith.tokens import ALPHABET
    from examples.toy.tiny_llama import save_char_tokenizer

    torch.manual_seed(0)
    cfg = llama_config(size)
    LlamaForCausalLM(cfg).save_pretrained(out)
    save_char_tokenizer(out, ALPHABET)
    return out


def measure(model_dir: str, mode: str, rank: int, syncs: int, prompts: int, tokens: int) -> dict:
    """In this (fresh) process: one engine of ``mode``, ``syncs`` syncs each followed by a batch."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from roles.algorithm.logprobs import response_logprobs
    from roles.engines.base import SamplingConfig
    from roles.engines.vllm_engine import VllmEngine
    from roles.models.lora import LoraConfig, inject_lora, is_adapter

    lora = LoraConfig(rank=rank, alpha=2.0 * rank)
    engine_cfg = SimpleNamespace(
        dtype="float32", quantization=None, tensor_parallel=1, gpu_memory_utilization=0.5, kv_cache_gib=1.0,
        max_seqs=prompts, compile=None, inflight_kv="keep", lora_mode=mode,
    )  # fmt: skip
    t0 = time.perf_counter()
    engine = VllmEngine.from_config(
        engine_cfg, SimpleNamespace(path=model_dir, dtype="float32", lora=lora), max_seqs=prompts
    )
    load_s = time.perf_counter() - t0
    policy = inject_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), lora).eval()
    rng = np.random.default_rng(0)
    batch = [rng.integers(3, 20, 12).astype(np.int32) for _ in range(prompts)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=tokens, seed=0)
    engine.generate(batch[:1], 1, SamplingConfig(temperature=1.0, max_new_tokens=4, seed=0))  # warm-up
    sync_s, tps, gap = [], [], 0.0
    g = torch.Generator().manual_seed(1)
    for version in range(1, syncs + 1):
        with torch.no_grad():
            for name, p in policy.named_parameters():
                if is_adapter(name):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)
        adapters = [(n, p.detach().clone()) for n, p in policy.named_parameters() if is_adapter(n)]
        engine.load_weights(adapters, version=version)
        sync_s.append(engine.last_update_s)
        t0 = time.perf_counter()
        samples = [s for group in engine.generate(batch, 1, sampling, ignore_eos=True) for s in group]
        tps.append(sum(len(s.response_ids) for s in samples) / (time.perf_counter() - t0))
        with torch.no_grad():
            logp, _ = response_logprobs(policy, batch, [s.response_ids for s in samples], 1.0)
        for row, s in enumerate(samples):
            gap = max(gap, float(np.abs(logp[row, : len(s.response_ids)].numpy() - s.logprobs).max()))
    return {
        "sync_s": statistics.median(sync_s),
        "tokens_per_s": statistics.median(tps),
        "logp_gap_max": gap,
        "load_s": load_s,
    }


def summarize(runs: list[dict]) -> dict:
    out = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = statistics.median(values)
        out[f"{key}_min"], out[f"{key}_max"] = min(values), max(values)
    return {k: float(f"{v:.4g}") for k, v in out.items()}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_one":  # the child process of one mode
        model_dir, mode, *numbers = sys.argv[2:]
        print(json.dumps(measure(model_dir, mode, *map(int, numbers))))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="25M", help=f"comma list of {list(SIZES)}")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    numbers = [str(n) for n in (args.rank, args.syncs, args.prompts, args.tokens)]
    for size in filter(None, args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-vllm-lora-") as tmp:
            model_dir = str(write_model(size, Path(tmp) / "model"))
            runs: dict[str, list[dict]] = {"native": [], "merged": []}
            for _ in range(args.repeats):
                for mode in runs:
                    cmd = [sys.executable, __file__, "--_one", model_dir, mode, *numbers]
                    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
                    runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
        line = {"bench": "vllm_lora", "size": size, "rank": args.rank, "prompts": args.prompts, "tokens": args.tokens}
        line.update({mode: summarize(r) for mode, r in runs.items()})
        line["loadavg_1m"] = os.getloadavg()[0]
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
