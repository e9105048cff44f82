"""bench/update_readme.py: it rewrites the async-vs-sync section of docs/performance.md, and only
that section, from a benchmark's result line."""

import importlib.util
import json
import re

import pytest

from runtime.spans import Spans
from support.paths import REPO

# Loaded by path: bench/ on sys.path would shadow the standard library's mailbox module.
_spec = importlib.util.spec_from_file_location("update_readme", REPO / "bench" / "update_readme.py")
update_readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(update_readme)

RESULT = {
    "steps": 40,
    "repeats": 3,
    "spread": {"speedup": [1.49, 1.76]},
    "colocated_sync_step_s": 0.174,
    "colocated_reward": 0.449,
    "sync_step_s": 0.233,
    "sync_reward": 0.441,
    "async_step_s": 0.144,
    "async_reward": 0.449,
    "t_gen": 0.128,
    "t_train": 0.069,
    "ideal_speedup": 1.5,
    "speedup": 1.56,
    "speedup_vs_ideal": 1.01,
    "async_step_over_max_phase": 1.15,
    "async_step_over_own_max_phase": 1.09,
    "async_t_train": 0.078,
    "async_t_gen": 0.132,
    "colocated_speedup": 1.16,
}


def test_the_performance_page_holds_the_markers_once():
    page = (REPO / "docs" / "performance.md").read_text()
    assert page.count(update_readme.START) == 1 and page.count(update_readme.END) == 1
    assert update_readme.START not in (REPO / "README.md").read_text()


def test_the_section_links_only_files_beside_the_page():
    for link in re.findall(r"\]\(([^)]+)\)", update_readme.section(RESULT)):
        assert (REPO / "docs" / link).is_file(), link


def test_only_the_text_between_the_markers_is_replaced(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text(f"before\n{update_readme.START}\nold figures\n{update_readme.END}\nafter\n")
    update_readme.write_section(page, RESULT)
    text = page.read_text()
    assert text.startswith("before\n" + update_readme.START) and text.endswith(update_readme.END + "\nafter\n")
    assert "old figures" not in text and "**1.56x** over disaggregated sync" in text


def test_a_page_without_the_markers_is_refused_unchanged(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text("no markers\n")
    with pytest.raises(SystemExit, match="lacks the markers"):
        update_readme.write_section(page, RESULT)
    assert page.read_text() == "no markers\n"


def test_from_json_writes_the_page_and_the_two_timelines(tmp_path, monkeypatch):
    docs, out = tmp_path / "docs", tmp_path / "bench_async"
    docs.mkdir()
    (docs / "performance.md").write_text(f"# Performance\n{update_readme.START}\n{update_readme.END}\n")
    for mode in ("sync", "async"):
        spans = Spans(1, "generator", 0)
        spans.add("generate", 100.0, 101.0)
        spans.write(out / "round-0" / mode)
    (out / "result.json").write_text(json.dumps(RESULT) + "\n")
    monkeypatch.setattr(update_readme, "DOCS", docs)
    monkeypatch.setattr("sys.argv", ["update_readme.py", "--from-json", str(out / "result.json"), "--out", str(out)])
    update_readme.main()
    assert (
        "| asynchronous (`max_staleness: 1`) | 1 generator + 1 trainer | 0.144 | 0.449 |"
        in (docs / "performance.md").read_text()
    )
    for mode in ("sync", "async"):
        assert (docs / f"timeline_{mode}.png").read_bytes()[:4] == b"\x89PNG"
