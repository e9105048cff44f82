"""mpirl trace: Perfetto JSON and a PNG timeline from per-rank span files."""

import json

import pytest

from launch.trace import write_trace
from runtime.spans import Spans


def _fake_run(tmp_path):
    gen = Spans(1, "generator", 0)
    gen.add("generate", 100.0, 101.0)
    gen.add("weight_receive", 101.0, 101.1)
    gen.add("generate", 101.1, 102.0)
    trainer = Spans(3, "trainer", 0)
    trainer.add("train", 100.5, 101.5)
    trainer.add("weight_send", 101.5, 101.6)
    gen.write(tmp_path)
    trainer.write(tmp_path)


def test_trace_json_has_one_track_per_rank_and_relative_times(tmp_path):
    _fake_run(tmp_path)
    trace_path, png_path = write_trace(tmp_path)
    trace = json.loads(trace_path.read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"rank 1: generator 0", "rank 3: trainer 0"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 5
    first = min(spans, key=lambda e: e["ts"])
    assert first["ts"] == 0 and first["name"] == "generate" and first["dur"] == pytest.approx(1e6)
    train = next(e for e in spans if e["name"] == "train")
    assert train["ts"] == pytest.approx(0.5e6) and train["tid"] == 3
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 5000


def test_busy_seconds_counts_only_recent_spans():
    s = Spans(0, "trainer", 0)
    s.add("train", 0.0, 2.0)
    s.add("weight_send", 2.0, 2.5)
    s.add("train", 3.0, 4.0)
    assert s.busy_seconds(since=1.0) == pytest.approx(1.0 + 0.5 + 1.0)
    assert s.busy_seconds(since=1.0, names=("train",)) == pytest.approx(2.0)


def test_missing_spans_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no spans"):
        write_trace(tmp_path)
