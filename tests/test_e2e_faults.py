"""Failures that are not crashes, in a real job: a NaN in the loss (algorithm.on_nonfinite)."""

from __future__ import annotations

import pytest
from test_e2e import CONFIG, sft_model  # noqa: F401 - sft_model is a fixture
from test_e2e_observe import run_job_capturing

from launch import recipe

pytestmark = pytest.mark.timeout(900)


def _config(tmp_path, sft_model, on_nonfinite):  # noqa: F811
    out = tmp_path / "run"
    overrides = {
        "model": {"path": str(sft_model)},
        "run": {"out": str(out), "steps": 5, "max_staleness": 0, "progress": False},
        "algorithm": {"on_nonfinite": on_nonfinite},
    }
    return recipe.write_config(CONFIG, out, overrides), out


def test_a_nan_loss_is_skipped_counted_and_the_run_goes_on(tmp_path, sft_model):  # noqa: F811
    cfg_path, out = _config(tmp_path, sft_model, "skip")
    done = run_job_capturing(cfg_path, {"MPIRL_INJECT_FAULT": "nan-loss:2"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == list(range(5))
    assert [m["nonfinite_skipped"] for m in metrics] == [0, 0, 1, 0, 0]
    assert "step 2: the loss (nan)" in done.stdout and "its update is skipped" in done.stdout


def test_a_nan_loss_stops_the_run_naming_rank_role_and_step(tmp_path, sft_model):  # noqa: F811
    cfg_path, out = _config(tmp_path, sft_model, "stop")
    done = run_job_capturing(cfg_path, {"MPIRL_INJECT_FAULT": "nan-loss:2"})
    text = done.stdout + done.stderr
    assert done.returncode not in (0, 2), text[-3000:]
    assert "rank 3 (trainer) failed" in text and "step 2: the loss (nan)" in text, text[-3000:]
    assert "algorithm.on_nonfinite is stop" in text
    assert len(recipe.read_metrics(out)) == 2  # steps 0 and 1; nothing was trained on the NaN
