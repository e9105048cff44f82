"""A real job with every dashboard on: TensorBoard, W&B offline, samples, plain progress lines."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from launch import recipe
from roles.observe.metric_names import step_scalars
from support.jobs import CONFIG, JOB_TIMEOUT_S, run_job_capturing
from support.paths import REPO
from support.run_records import tensorboard_scalars, wandb_history

pytestmark = pytest.mark.timeout(900)


def test_a_job_feeds_tensorboard_wandb_and_samples_the_same_numbers(tmp_path, sft_model):  # noqa: F811
    out = tmp_path / "run"
    steps, shown = 6, 3
    overrides = {
        "model": {"path": str(sft_model)},
        "run": {"out": str(out), "steps": steps, "progress": True},
        "logging": {
            "tensorboard": True,
            "wandb": {"project": "mpirl-e2e", "mode": "offline"},
            "samples_per_step": shown,
            "progress_every_s": 1e-6,  # a line per step (two steps can end within 10 ms): each is checked below
        },
    }
    # The role map outside run.out, as a user's: the job copies it there for report and advise.
    cfg_path = recipe.write_config(CONFIG, tmp_path / "role-map", overrides)
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_API_KEY": ""}
    done = run_job_capturing(cfg_path, env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == list(range(steps))
    assert (out / "config.yaml").read_text() == cfg_path.read_text()

    # TensorBoard: the event files hold metrics.jsonl's numbers under the grouped names.
    tb = tensorboard_scalars(out / "tensorboard")
    for m in metrics:
        for name, value in step_scalars(m).items():
            assert tb[name][m["step"]] == pytest.approx(value, rel=1e-6, abs=1e-9), name

    # The dashboards are the controller's, and it still imports no torch (start-up).
    from launch.tools.trace import read_spans

    assert [r["torch_imported"] for r in read_spans(out) if r["role"] in ("controller", "reward")] == [False, False]

    # W&B offline: a run folder with the same history, nothing uploaded.
    (run_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    rows = [r for r in wandb_history(run_file) if "reward/mean" in r]
    assert [r["trainer_step"] for r in rows] == list(range(steps))
    for row, m in zip(rows, metrics, strict=True):
        assert row["reward/mean"] == pytest.approx(m["reward_mean"]) and row["train/loss"] == pytest.approx(m["loss"])

    # Samples: N per step, decoded text, each reward one of the step's.
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    by_step = {s: [r for r in samples if r["step"] == s] for s in range(steps)}
    assert all(len(rows) == shown for rows in by_step.values()), {s: len(r) for s, r in by_step.items()}
    for r in samples:
        assert r["prompt"] and isinstance(r["response"], str) and r["finish_reason"] in ("stop", "length")
        assert r["reward"] in (0.0, 1.0) and set(r["components"]) >= {"correct"}
        assert r["policy_version"] <= r["step"] + 1 and r["sample"] == 0  # 3 prompts of 16: sample 0 of each
    assert len({(r["step"], r["group_id"]) for r in samples}) == len(samples)

    # Progress off a terminal: plain lines, no redraws; a line per eval is not asked here.
    assert "\r" not in done.stdout
    lines = [x for x in done.stdout.splitlines() if x.startswith("mpirl: step ")]
    assert [x.split()[2] for x in lines] == [f"{s}/{steps}" for s in range(1, steps + 1)], done.stdout[-2000:]
    assert any(x.startswith(f"mpirl: done: {steps} steps") for x in done.stdout.splitlines())


def test_a_dashboard_that_cannot_start_stops_the_job_before_any_work(tmp_path, sft_model):  # noqa: F811
    out = tmp_path / "run"
    cfg_path = recipe.write_config(
        CONFIG,
        out,
        {"model": {"path": str(sft_model)}, "run": {"out": str(out), "steps": 2}, "logging": {"tensorboard": True}},
    )
    (out / "tensorboard").write_text("a file where the event folder goes")
    done = run_job_capturing(cfg_path, {})
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert "config error" in done.stderr and "logging.tensorboard: could not start" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (out / "metrics.jsonl").exists()  # no step ran


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux's script (a pseudo-terminal)")
def test_mpirl_run_at_a_terminal_draws_a_bar(tmp_path, sft_model):  # noqa: F811
    """mpirun gives the ranks a pty of no size whatever its own stdout is; `mpirl run` tells
    the controller that a person is watching, and the bar is drawn (redrawn with \\r)."""
    out = tmp_path / "run"
    cfg_path = recipe.write_config(
        CONFIG, out, {"model": {"path": str(sft_model)}, "run": {"out": str(out), "steps": 4, "progress": True}}
    )
    command = f"{shlex.quote(sys.executable)} -m launch.cli run {shlex.quote(str(cfg_path))}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("MPIRL_PROGRESS", None)
    done = subprocess.run(["script", "-qec", command, "/dev/null"], env=env, capture_output=True, timeout=JOB_TIMEOUT_S)
    text = done.stdout.decode(errors="replace")  # bytes: universal newlines would hide the \r
    assert done.returncode == 0, text[-3000:]
    frames = [f for f in text.replace("\r\n", "\n").split("\r") if "mpirl:" in f and "/4 [" in f]
    assert len(frames) >= 2 and "4/4" in frames[-1] and "reward" in frames[-1], text[-2000:]
    assert "mpirl: step " not in text  # a bar, not the log file's plain lines
