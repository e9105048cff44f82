"""Command-line overrides end to end (bounded in time): ``mpirl run CONFIG KEY=VALUE ...`` runs
the merged role map on every rank, and its run folder records what ran."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S
from support.paths import REPO

pytestmark = pytest.mark.timeout(600)


@pytest.mark.slow
def test_mpirl_run_with_overrides_runs_and_records_the_merged_role_map(tmp_path, sft_model):
    cfg = recipe.write_config(CONFIG, tmp_path / "file", {"model": {"path": str(sft_model)}, "run": {"steps": 50}})
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "launch.cli", "run", str(cfg), f"run.out={out}", "run.steps=2",
           "rollout.prompts_per_step=4", "run.progress=false"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == [0, 1] and all(m["trainer"]["samples"] == 4 * 8 for m in metrics)
    recorded = (out / "config.yaml").read_text()
    assert "with the command line's overrides: run.out=" in recorded.splitlines()[0]
    saved = yaml.safe_load(recorded)
    assert saved["run"]["steps"] == 2 and saved["rollout"]["prompts_per_step"] == 4
    assert saved["model"]["path"] == str(sft_model)
