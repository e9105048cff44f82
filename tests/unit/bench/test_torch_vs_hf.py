"""bench/torch_vs_hf.py: our torch engine and HF ``generate`` timed on the same work."""

import importlib.util

import pytest
import torch

from examples.arith.tokens import ALPHABET
from examples.toy.tiny_llama import TINY, build_tiny_llama
from support.paths import REPO

torch.set_num_threads(1)

# Loaded by path, as bench/wait_policy.py is: bench/ is not a package.
_spec = importlib.util.spec_from_file_location("torch_vs_hf", REPO / "bench" / "torch_vs_hf.py")
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
bench_vs_hf_generate = _module.bench_vs_hf_generate


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("engine") / "a", ALPHABET, seed=0, **TINY.kwargs())


def test_bench_reports_equal_token_counts(model_dir):
    r = bench_vs_hf_generate(model_dir, batch=2, new_tokens=3, prompt_len=4, repeats=1)
    assert r["hf_generate_tokens"] == r["torch_engine_tokens"] == 6
    assert r["ratio"] > 0 and r["ratio_cpu"] > 0
