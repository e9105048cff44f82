"""launch/recipe.py: a finished run's metrics as the demos, benchmarks and end-to-end tests read them."""

from __future__ import annotations

import pytest

from launch.recipe import read_metrics


def test_metrics_are_every_line_in_file_order_and_damage_is_an_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n\n{"step": 1}\n{"step": 1}\n')
    assert read_metrics(tmp_path) == [{"step": 0}, {"step": 1}, {"step": 1}]  # as written: no step merged
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1, "cu')
    with pytest.raises(ValueError, match=r"metrics\.jsonl: the last line \(line 2\) is cut short"):
        read_metrics(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_metrics(tmp_path / "nowhere")
