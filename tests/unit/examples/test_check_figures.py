"""examples/check_figures.py: the guard on the demos' learning figures must be able to fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples import check_figures

REPO = Path(check_figures.__file__).resolve().parents[1]

EXPECTED = {
    "demo": "make demo-x",
    "summary": "runs/x/summary.json",
    "figures": {
        "heldout_acc_before": {"value": 0.264, "tolerance": 0.01},
        "heldout_acc_after": {"value": 0.316, "tolerance": 0.02},
        "heldout_acc_after - heldout_acc_before": {"value": 0.052, "tolerance": 0.02},
        "eval_last.pass@1": {"value": 0.35, "tolerance": 0.03},
    },
}


def _summary(before=0.264, after=0.316, last=0.35) -> dict:
    return {"heldout_acc_before": before, "heldout_acc_after": after, "eval_last": {"pass@1": last}}


def test_figures_read_keys_paths_and_differences():
    s = _summary()
    assert check_figures.figure(s, "heldout_acc_before") == 0.264
    assert check_figures.figure(s, "eval_last.pass@1") == 0.35
    assert check_figures.figure(s, "heldout_acc_after - heldout_acc_before") == pytest.approx(0.052)
    with pytest.raises(KeyError):
        check_figures.figure(s, "eval_first.pass@1")


def test_a_summary_inside_tolerance_passes():
    lines, failures = check_figures.check(EXPECTED, _summary(before=0.27, after=0.33, last=0.33))
    assert failures == []
    assert len(lines) == len(EXPECTED["figures"])


def test_a_summary_outside_tolerance_fails_naming_each_figure():
    _, failures = check_figures.check(EXPECTED, _summary(after=0.29, last=0.30))
    named = sorted(f.split(" = ")[0] for f in failures)
    assert named == ["eval_last.pass@1", "heldout_acc_after", "heldout_acc_after - heldout_acc_before"]


def test_a_missing_figure_fails():
    _, failures = check_figures.check(EXPECTED, {"heldout_acc_before": 0.264, "heldout_acc_after": 0.316})
    assert [f.split(":")[0] for f in failures] == ["eval_last.pass@1"]


def test_main_exit_status(tmp_path, capsys):
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps(EXPECTED))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(_summary()))
    assert check_figures.main([str(expected), "--summary", str(summary)]) == 0
    summary.write_text(json.dumps(_summary(before=0.20)))
    assert check_figures.main([str(expected), "--summary", str(summary)]) == 1
    err = capsys.readouterr().err
    assert "make demo-x: figure out of tolerance: heldout_acc_before" in err
    assert check_figures.main([str(expected), "--summary", str(tmp_path / "absent.json")]) == 2


@pytest.mark.parametrize("path", check_figures.DEFAULT, ids=lambda p: p.parent.name)
def test_the_demos_expected_files_are_well_formed(path):
    expected = json.loads(path.read_text())
    assert expected["demo"].startswith("make ")
    assert expected["summary"].startswith("runs/") and expected["summary"].endswith("summary.json")
    assert expected["figures"]
    for name, want in expected["figures"].items():
        assert set(want) >= {"value", "tolerance"}, name
        assert 0 < want["tolerance"] < 0.1, name
    # The lift is guarded: it is what the demo is for.
    assert "heldout_acc_after - heldout_acc_before" in expected["figures"]
