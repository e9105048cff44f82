"""mpirl trace: Perfetto JSON and a PNG timeline from per-rank span files."""

import json
import subprocess
import sys
import time

import pytest

from launch.tools.trace import colour_of, read_spans, write_trace
from runtime.actor import Actor
from runtime.spans import Spans, clear_spans, process_started_at
from support.mpi_helpers import REPO
from support.quiet_mailbox import QuietMailbox


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


def test_a_rank_killed_while_writing_its_spans_is_skipped_not_fatal(tmp_path):
    _fake_run(tmp_path)
    spans = tmp_path / "spans"
    # The trainer was killed mid-line; a third rank died before its header was out.
    trainer = spans / "rank-0003.jsonl"
    trainer.write_text(trainer.read_text()[:-25])
    (spans / "rank-0004.jsonl").write_text('{"rank": 4, "ro')
    trace = json.loads(write_trace(tmp_path)[0].read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"rank 1: generator 0", "rank 3: trainer 0"}
    assert [e["name"] for e in trace["traceEvents"] if e["tid"] == 3 and e["ph"] == "X"] == ["train"]


def test_trace_of_a_folder_without_spans_exits_2_with_the_reason(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "launch.cli", "trace", str(tmp_path)], cwd=REPO, capture_output=True, text=True
    )
    assert run.returncode == 2, run.stderr
    assert "no spans" in run.stderr and "Traceback" not in run.stderr


def test_process_start_is_read_from_the_system_not_from_python():
    """Before the interpreter ran anything (a clock started in Python would miss its start-up)."""
    code = (
        "import time; t = time.time(); import sys; sys.path.insert(0, sys.argv[1]); "
        "from runtime.spans import process_started_at; print(process_started_at(), t)"
    )
    before = time.time()
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, check=True).stdout
    after = time.time()
    started, first_line = map(float, out.split())
    assert before - 0.05 <= started <= first_line + 0.02 <= after + 0.02  # /proc counts in 1/100 s
    assert process_started_at() < time.time()


def test_peak_memory_grows_with_what_the_process_touched():
    # In a fresh process, whose own mark must not be its parent's (ranks are started by mpirun).
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from runtime.spans import peak_rss_bytes; "
        "a = peak_rss_bytes(); block = bytearray(200 << 20); print(a, peak_rss_bytes())"
    )
    parent = bytearray(300 << 20)  # a large parent: getrusage's figure is inherited at fork
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, check=True).stdout
    del parent
    before, after = map(int, out.split())
    # bytearray() writes every page; the mark before may be above what the process held then.
    assert 0 < before < 150 << 20 and after >= 200 << 20


def test_start_up_and_shutdown_phases_have_colours_of_their_own(tmp_path):
    assert colour_of("start.imports") == colour_of("start.build") != colour_of("stop.finish")
    assert colour_of("train") != colour_of("start.imports")
    s = Spans(0, "controller", 0)
    s.add("start.python", 99.0, 99.5)
    s.add("stop.finish", 100.0, 100.2)
    s.write(tmp_path)
    trace_path, png_path = write_trace(tmp_path)
    header = json.loads((tmp_path / "spans" / "rank-0000.jsonl").read_text().splitlines()[0])
    assert header["peak_rss_bytes"] > 0
    assert {e["name"] for e in json.loads(trace_path.read_text())["traceEvents"] if e["ph"] == "X"} == {
        "start.python",
        "stop.finish",
    }


# ------------------------------------------------------------- spans written as the run goes


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_spans_reach_the_file_as_the_run_goes_and_the_end_rewrites_it_whole(tmp_path):
    s = Spans(3, "trainer", 0)
    s.add("start.build", 1.0, 2.0)
    path = s.start_file(tmp_path)
    assert [x.get("name") for x in _lines(path)] == [None, "start.build"]  # the header, then the start-up
    assert s.flush_at - time.perf_counter() == pytest.approx(s.flush_every_s, abs=1.0)
    s.add("train", 2.0, 3.0)
    assert len(_lines(path)) == 2  # not yet due: nothing written per span
    s.flush()
    s.add("weight_send", 3.0, 3.5)
    s.flush()
    s.flush()  # nothing new: nothing written
    assert [x.get("name") for x in _lines(path)] == [None, "start.build", "train", "weight_send"]
    s.add("stop.mailbox_close", 4.0, 4.1)
    s.write(tmp_path)  # the run's end: every span once, under a fresh header
    assert [x.get("name") for x in _lines(path)] == [None, "start.build", "train", "weight_send", "stop.mailbox_close"]
    assert not list((tmp_path / "spans").glob(".*"))  # no temporary file left


def test_a_new_start_replaces_the_file_of_an_earlier_one(tmp_path):
    """A resumed run: each rank's file holds this start's spans only, once; a rank the earlier
    start had and this one lacks leaves nothing behind (launch/main.py clears them first)."""
    for rank in (3, 4):
        earlier = Spans(rank, "trainer", rank - 3)
        earlier.add("start.python", 1.0, 2.0)
        earlier.start_file(tmp_path)
        earlier.add("train", 2.0, 3.0)
        earlier.flush()  # then killed
    clear_spans(tmp_path)
    assert not list((tmp_path / "spans").iterdir())
    again = Spans(3, "trainer", 0)
    again.add("start.python", 10.0, 11.0)
    again.start_file(tmp_path)
    (rank,) = read_spans(tmp_path)
    assert [(s["name"], s["start"]) for s in rank["spans"]] == [("start.python", 10.0)]


def test_a_crashed_rank_leaves_its_spans_up_to_the_last_flush(tmp_path, monkeypatch):
    """The actor loop flushes every flush_every_s (no thread): a rank killed mid-run (kill -9,
    no final write) is still traced up to its last turn's flush; one whose loop raises flushes
    everything on its way out."""
    monkeypatch.setattr(Spans, "flush_every_s", 0.03)
    on_disk_at_turn_20 = []

    class Crashes(Actor):
        turns = 0

        def step(self):
            with self.spans.span("train"):
                time.sleep(0.01)
            self.turns += 1
            if self.turns == 20:
                on_disk_at_turn_20.extend(read_spans(tmp_path))  # what a kill -9 now would leave
                raise RuntimeError("failed")
            return True

    actor = Crashes(QuietMailbox(rank=3, role="trainer"))
    actor.spans.add("start.build", time.time() - 1, time.time())
    actor.spans.start_file(tmp_path)
    with pytest.raises(RuntimeError, match="failed"):
        actor.run()
    (rank,) = on_disk_at_turn_20
    assert rank["role"] == "trainer" and rank["spans"][0]["name"] == "start.build"
    trains = [s["start"] for s in rank["spans"] if s["name"] == "train"]
    # 20 turns of 10 ms or more, a flush due every 30 ms: several flushed, in order, none twice;
    # the last one, recorded after the last flush, is not on disk.
    assert 3 <= len(trains) < 20 and trains == sorted(set(trains))
    # The failure itself flushed the rest: all 20, each once.
    (rank,) = read_spans(tmp_path)
    assert [s["start"] for s in rank["spans"] if s["name"] == "train"] == sorted(
        set(s[1] for s in actor.spans.records if s[0] == "train")
    )
    trace = json.loads(write_trace(tmp_path)[0].read_text())
    assert sum(e["name"] == "train" for e in trace["traceEvents"]) == 20
