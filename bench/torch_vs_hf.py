"""Our torch engine against Hugging Face ``model.generate(do_sample=True)``, on one shared model.

``bench_vs_hf_generate`` times the two side by side; ``hf_sample`` is the HF side, which
``bench/generation.py`` runs beside vLLM too. Imported by those scripts (bench/ is their
``sys.path[0]``) and by tests/unit/bench/test_torch_vs_hf.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from roles.engines.base import SamplingConfig  # noqa: E402
from roles.engines.torch_engine import TorchEngine  # noqa: E402


def hf_sample(model, ids: torch.Tensor, new_tokens: int, pad_id: int) -> int:
    """Tokens ``model.generate`` samples for the prompt rows ``ids``: exactly ``new_tokens`` per
    row (EOS suppressed by ``min_new_tokens``), temperature 1, no top-p / top-k."""
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=pad_id,
        )
    out = out.cpu()  # wait for the device, as the torch engine does
    return (out.shape[1] - ids.shape[1]) * ids.shape[0]


def bench_vs_hf_generate(
    model_dir: str | Path,
    batch: int = 64,
    new_tokens: int = 128,
    prompt_len: int = 8,
    repeats: int = 2,
    seed: int = 0,
    device: str = "cpu",
) -> dict:
    """Sampling throughput of our torch engine and of ``model.generate(do_sample=True)``, side by side.

    Both produce exactly ``batch * new_tokens`` tokens (EOS is suppressed until the last
    token, HF via ``min_new_tokens``), temperature 1, no top-p / top-k, on one shared model.
    After one untimed warm-up each, the two are timed alternately ``repeats`` times (so a
    burst of load on a shared machine hits both) and the best run of each counts.
    Returns one flat dict: tokens per wall second and per CPU second of each, their ratios,
    and the run's shape.
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    engine = TorchEngine(model, device=device)
    g = torch.Generator().manual_seed(seed)
    # Random ids above the special ones (0..2 in our tokenizers): a prompt of plain characters.
    prompts = torch.randint(3, model.config.vocab_size, (batch, prompt_len), generator=g)
    rows = [p.numpy().astype(np.int32) for p in prompts]
    prompts = prompts.to(device)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=new_tokens)

    def ours() -> int:
        gen = torch.Generator(device).manual_seed(seed)
        out = engine._sample(rows, sampling, gen, new_tokens)  # ends with a copy to host: synced
        return sum(len(s.response_ids) for s in out)

    def hf() -> int:
        torch.manual_seed(seed)
        return hf_sample(model, prompts, new_tokens, engine.pad_id)

    runs = {"hf_generate": (hf, [], []), "torch_engine": (ours, [], [])}
    for fn, _, _ in runs.values():
        fn()  # warm-up: allocator, lazy init, first-call paths
    tokens = {}
    for _ in range(repeats):
        for name, (fn, walls, cpus) in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            tokens[name] = fn()
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    result = {
        "batch": batch,
        "new_tokens": new_tokens,
        "prompt_len": prompt_len,
        "device": device,
        "threads": torch.get_num_threads(),
    }
    for name, (_, walls, cpus) in runs.items():
        result[f"{name}_tokens"] = tokens[name]
        result[f"{name}_tok_s"] = tokens[name] / min(walls)
        # tokens per CPU-second: steadier than wall time when other jobs share the cores
        result[f"{name}_tok_cpu_s"] = tokens[name] / min(cpus)
    result["ratio"] = result["torch_engine_tok_s"] / result["hf_generate_tok_s"]
    result["ratio_cpu"] = result["torch_engine_tok_cpu_s"] / result["hf_generate_tok_cpu_s"]
    return result
