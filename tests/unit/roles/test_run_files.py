"""roles/run_files.py: the one reader of a run's JSON-lines logs, tolerant of a damaged or
cut-short line, and the rewrite a resumed run makes of its logs."""

from __future__ import annotations

import json

from roles.run_files import keep_jsonl, read_jsonl


def test_logs_keep_each_step_once(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(6)) + '{"step": 6, "cut')
    kept = keep_jsonl(log, lambda r: r["step"] < 4)
    assert [r["step"] for r in kept] == [0, 1, 2, 3]
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [0, 1, 2, 3]


def test_a_damaged_line_is_skipped_and_noted_and_a_cut_last_line_told_apart(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_bytes(b'{"step": 0}\n{"st\xff\n\n[1, 2]\n{"step": 1}\n{"step": 2, "cu')
    records, notes = read_jsonl(log)
    assert records == [{"step": 0}, {"step": 1}]
    assert notes == [
        "metrics.jsonl: the last line (line 6) is cut short or undecodable: skipped",
        "metrics.jsonl: 2 undecodable lines skipped (line 2, 4)",
    ]
    log.write_text('{"step": 0}\n{"step": 1}\n')
    assert read_jsonl(log) == ([{"step": 0}, {"step": 1}], [])  # whole: nothing noted


def test_a_resumed_log_drops_a_damaged_line_and_keeps_a_missing_file_missing(tmp_path):
    log = tmp_path / "eval.jsonl"
    log.write_text('{"step": 0}\n{"st\n{"step": 1}\n')
    assert keep_jsonl(log, lambda r: True) == [{"step": 0}, {"step": 1}]
    assert [json.loads(x) for x in log.read_text().splitlines()] == [{"step": 0}, {"step": 1}]
    assert keep_jsonl(tmp_path / "samples.jsonl", lambda r: True) == []
    assert not (tmp_path / "samples.jsonl").exists()
