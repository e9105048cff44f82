"""bench/lora.py without MPI or a timed run: the models it builds, what a sync of each mode
moves, the ratios of its line."""

import importlib.util
import sys

import pytest

from support.paths import REPO

pytestmark = pytest.mark.timeout(120)

sys.path.insert(0, str(REPO / "bench"))
_spec = importlib.util.spec_from_file_location("lora_bench", REPO / "bench" / "lora.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_a_lora_sync_moves_the_adapters_and_a_full_one_every_weight():
    full, lora = bench.build("25M", 0), bench.build("25M", 4)
    full_payload, lora_payload = bench.sync_payload(full, False), bench.sync_payload(lora, True)
    assert set(full_payload) == {n for n, _ in full.named_parameters()}
    assert lora_payload and all(".lora_" in n for n in lora_payload)
    hidden, layers = bench.SIZES["25M"][:2]
    # rank 4 on 7 linear layers per block: A (4 x in) and B (out x 4) each
    per_layer = sum(4 * (i + o) for i, o in [(hidden, hidden)] * 4 + [(hidden, 688), (hidden, 688), (688, hidden)])
    assert sum(t.numel() for t in lora_payload.values()) == layers * per_layer


def test_the_line_holds_lora_over_full_for_each_figure():
    full = {"step_s": 2.0, "peak_rss_mb": 1000.0, "sync_bytes": 400, "sync_s": 0.5}
    lora = {"step_s": 1.0, "peak_rss_mb": 450.0, "sync_bytes": 8, "sync_s": 0.05}
    assert bench.compare(full, lora) == {"step_s": 0.5, "peak_rss_mb": 0.45, "sync_bytes": 0.02, "sync_s": 0.1}


def test_repeats_are_summarized_as_medians_with_their_range():
    runs = [
        {"step_s": 3.0, "sync_bytes": 8, "trained_params": 2},
        {"step_s": 1.0, "sync_bytes": 8, "trained_params": 2},
        {"step_s": 2.0, "sync_bytes": 8, "trained_params": 2},
    ]
    assert bench.summarize(runs) == {
        "step_s": 2.0, "step_s_min": 1.0, "step_s_max": 3.0, "sync_bytes": 8, "trained_params": 2,
    }  # fmt: skip
