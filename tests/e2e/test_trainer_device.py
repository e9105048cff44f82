"""``world.trainer.device: cuda`` where a trainer rank sees no GPU (this machine, CI's): the job
stops before any work with exit 2 and one line naming the field, on every rank (bounded in time)."""

from __future__ import annotations

import pytest

from support.jobs import run_job_capturing

pytestmark = pytest.mark.timeout(300)


def test_cuda_trainers_without_a_gpu_stop_the_job_with_exit_2(base_config, write_config, tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the trainer would take it")
    base_config["world"]["trainer"] = {"ranks": 1, "device": "cuda"}
    base_config["run"]["out"] = str(tmp_path / "run")
    done = run_job_capturing(write_config(base_config), {})
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("mpirl: config error:")]
    assert len(errors) == 1, done.stderr[-3000:]  # rank 0 says it, once
    assert "world.trainer.device is cuda, but trainer rank 3" in errors[0] and "sees no GPU" in errors[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
