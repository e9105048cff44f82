"""bench/vllm_lora.py without vLLM or a timed run: how its repeats are summarized."""

import importlib.util
import sys

import pytest

from support.paths import REPO

pytestmark = pytest.mark.timeout(60)

sys.path.insert(0, str(REPO / "bench"))
_spec = importlib.util.spec_from_file_location("vllm_lora_bench", REPO / "bench" / "vllm_lora.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_each_figure_is_the_median_of_the_repeats_with_its_range():
    runs = [
        {"sync_s": 0.3, "tokens_per_s": 100.0},
        {"sync_s": 0.1, "tokens_per_s": 300.0},
        {"sync_s": 0.2, "tokens_per_s": 200.0},
    ]
    assert bench.summarize(runs) == {
        "sync_s": 0.2, "sync_s_min": 0.1, "sync_s_max": 0.3,
        "tokens_per_s": 200.0, "tokens_per_s_min": 100.0, "tokens_per_s_max": 300.0,
    }  # fmt: skip
