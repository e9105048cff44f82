"""Checkpoints end to end: a job killed with SIGKILL after a checkpoint, resumed, against an
uninterrupted run of the same seed (bounded in time: a hang fails the test).

At ``max_staleness: 0`` the resumed run must give bit-identical weights and the same rewards
and losses step by step; at 1 it must train every step once, on the same examples, within the
staleness bound.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from examples.arith import prepare as arith
from launch import recipe
from support.jobs import kill_after_checkpoint
from support.paths import REPO

CONFIG = REPO / "examples/arith/async.yaml"
JOB_TIMEOUT_S = 600
pytestmark = pytest.mark.timeout(1500)

STEPS, EVERY = 8, 2


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("arith")
    arith.prepare_model(root, seed=0)
    return root / "sft"


def _config(run_dir: Path, sft_model: Path, staleness: int, **extra) -> Path:
    overrides = {
        "model": {"path": str(sft_model)},
        "rollout": {"prompts_per_step": 8, "samples_per_prompt": 4},
        "run": {"out": str(run_dir), "progress": False, "steps": STEPS, "max_staleness": staleness},
        "checkpoint": {"every_steps": EVERY, "keep_last": 2},
    }
    return recipe.write_config(CONFIG, run_dir, recipe.merge_overrides(overrides, extra))


def _weights(run_dir: Path) -> dict:
    return load_file(str(run_dir / "policy" / "model.safetensors"))


# A run with a critic (PPO, GAE): its value model and optimizer are checkpointed too.
CRITIC = {"world": {"critic": 1}, "algorithm": {"advantage": "gae", "loss": "ppo"}}


# A LoRA run (model.lora): the adapters and their optimizer state are checkpointed; export merges them.
LORA = {"model": {"lora": {"rank": 4}}, "algorithm": {"lr": 1e-3}}


def _assert_adapters_only(checkpoint: Path, sft_model: Path) -> None:
    """A LoRA checkpoint's trainer shards are the adapters and their two Adam moments (and the
    optimizer's pickled settings), far below the base it records (lora_base.json)."""
    import torch

    from roles.models.loading import load_complete
    from roles.models.lora import LoraConfig, inject_lora, is_adapter

    model = inject_lora(load_complete(sft_model, torch.float32), LoraConfig(**LORA["model"]["lora"]))
    sizes = {True: 0, False: 0}
    for name, p in model.named_parameters():
        sizes[is_adapter(name)] += p.numel() * p.element_size()
    on_disk = sum(f.stat().st_size for f in (checkpoint / "trainer").glob("*.raw"))
    assert 3 * sizes[True] <= on_disk < 3 * sizes[True] + (64 << 10), (on_disk, sizes)
    assert on_disk < sizes[False] / 4 and (checkpoint / "lora_base.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode", ["batch", *(pytest.param(m, marks=pytest.mark.matrix) for m in ("stream", "critic", "lora"))]
)
def test_a_killed_run_resumes_bit_identically_at_staleness_0(tmp_path, sft_model, mode):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    rollout = {"critic": CRITIC, "lora": LORA}.get(mode) or {"rollout": {"mode": mode}}
    recipe.run_job(_config(whole, sft_model, 0, **rollout), timeout_s=JOB_TIMEOUT_S, quiet=True)
    kill_after_checkpoint(_config(broken, sft_model, 0, **rollout), broken, steps_done=4)
    recipe.run_job(_config(broken, sft_model, 0, **rollout), timeout_s=JOB_TIMEOUT_S, quiet=True)  # resume: auto

    a, b = recipe.read_metrics(whole), recipe.read_metrics(broken)
    assert [m["step"] for m in b] == list(range(STEPS))  # no step missing, none twice
    for x, y in zip(a, b):
        for key in ("reward_mean", "loss", "correct_mean", "tokens", "policy_version"):
            assert x[key] == y[key], (x["step"], key, x[key], y[key])
        assert x["trainer"]["example_id_sum"] == y["trainer"]["example_id_sum"]
        assert x.get("critic", {}).get("value_loss") == y.get("critic", {}).get("value_loss")
    wa, wb = _weights(whole), _weights(broken)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert (wa[name] == wb[name]).all(), name  # bit-identical
    # keep_last 2: the last two checkpoints stay, complete
    kept = sorted(p.name for p in (broken / "checkpoints").iterdir() if p.name.startswith("step-"))
    assert kept == [f"step-{STEPS - EVERY:08d}", f"step-{STEPS:08d}"]
    assert (broken / "checkpoints" / "latest").read_text().strip() == f"step-{STEPS:08d}"
    if mode == "lora":
        _assert_adapters_only(broken / "checkpoints" / f"step-{STEPS:08d}", sft_model)
    # mpirl export: the newest checkpoint as a Hugging Face folder, the same weights as the policy's
    exported = tmp_path / "exported"
    cli = [sys.executable, "-m", "launch.cli", "export", str(broken / "checkpoints"), str(exported)]
    subprocess.run(cli, check=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
    we = load_file(str(exported / "model.safetensors"))
    assert we.keys() == wb.keys() and all((we[n] == wb[n]).all() for n in we)
    if mode == "batch":  # an adapter folder only from a LoRA run: said, exit 2
        adapter = subprocess.run(
            [*cli[:-1], str(tmp_path / "adapter"), "--adapter"], timeout=300, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert adapter.returncode == 2 and "an adapter folder needs a LoRA run" in adapter.stderr, adapter.stderr
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(str(exported)), AutoTokenizer.from_pretrained(str(exported))
    if mode == "critic":  # mpirl export --critic: the value model, loadable as critic.path
        from roles.value.model import load_value_model

        value_dir = tmp_path / "value"
        subprocess.run(
            [*cli[:-1], str(value_dir), "--critic"],
            check=True,
            timeout=300,
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert load_value_model(value_dir, "float32").config.num_labels == 1
    summary = json.loads((broken / "summary.json").read_text())
    assert summary["steps"] == STEPS  # the summary covers the whole run, not just its second part
    assert summary["train_reward_first10"] == json.loads((whole / "summary.json").read_text())["train_reward_first10"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["batch", pytest.param("stream", marks=pytest.mark.matrix), "partial"])
def test_a_killed_run_trains_every_step_once_at_staleness_1(tmp_path, sft_model, mode):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    rollout = {"mode": "stream", "oversample": 0.5} if mode == "partial" else {"mode": mode}
    recipe.run_job(_config(whole, sft_model, 1, rollout=rollout), timeout_s=JOB_TIMEOUT_S, quiet=True)
    kill_after_checkpoint(_config(broken, sft_model, 1, rollout=rollout), broken, steps_done=4)
    recipe.run_job(_config(broken, sft_model, 1, rollout=rollout), timeout_s=JOB_TIMEOUT_S, quiet=True)

    a, b = recipe.read_metrics(whole), recipe.read_metrics(broken)
    assert [m["step"] for m in b] == list(range(STEPS))
    assert [m["policy_version"] for m in b] == list(range(1, STEPS + 1))
    for x, y in zip(a, b):
        assert y["staleness_max"] <= 1
        if mode != "partial":  # the same examples, step by step: none skipped, none twice
            assert x["trainer"]["example_id_sum"] == y["trainer"]["example_id_sum"], x["step"]
            assert x["trainer"]["example_id_sqsum"] == y["trainer"]["example_id_sqsum"], x["step"]


def _start_with_mpirl_run(config: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "launch.cli", "run", str(config)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_steps(proc, run_dir: Path, n: int) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= n):
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the job made no progress"
        time.sleep(0.05)


@pytest.mark.slow
# Staleness 0 on one host: weights.transport auto is MPI, whose posted receives a stopping
# generator leaves behind as gloo's; 1: gloo.
@pytest.mark.parametrize(
    "staleness", [pytest.param(1, id="async-gloo"), pytest.param(0, id="sync-mpi-buffers", marks=pytest.mark.matrix)]
)
def test_sigterm_to_mpirl_run_checkpoints_exits_resumable_and_resumes(tmp_path, sft_model, staleness):
    from runtime.preemption import EXIT_RESUMABLE

    run_dir = tmp_path / "run"
    # No periodic checkpoints: the one on disk can only come from the signal.
    config = _config(run_dir, sft_model, staleness, checkpoint={"every_steps": 0}, run={"steps": 30})
    proc = _start_with_mpirl_run(config)
    try:
        _wait_for_steps(proc, run_dir, 3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # what scancel or a time limit does to the launcher
        out, _ = proc.communicate(timeout=JOB_TIMEOUT_S)
        stop_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == EXIT_RESUMABLE, out.decode()[-3000:]
    newest = max((run_dir / "checkpoints").glob("step-*"))
    assert (newest / "COMPLETE").is_file()
    done = int(newest.name.split("-")[1])
    assert 3 <= done < 30 and stop_s < 120, (done, stop_s)
    print(f"\nSIGTERM -> exit {proc.returncode} in {stop_s:.1f} s, checkpoint after step {done}")
    recipe.run_job(config, timeout_s=JOB_TIMEOUT_S, quiet=True)  # run.resume: auto finishes it
    metrics = recipe.read_metrics(run_dir)
    assert [m["step"] for m in metrics] == list(range(30))


def _pid_of_rank(config: Path, rank: int) -> int:
    """The process of ``rank`` of the job started from ``config`` (Open MPI puts it in the environ)."""
    for proc_dir in Path("/proc").iterdir():
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
            if str(config).encode() not in cmdline or b"launch" not in cmdline:
                continue
            environ = (proc_dir / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(proc_dir.name)
    raise LookupError(f"no process of rank {rank}")


@pytest.mark.slow
def test_restarts_relaunch_a_job_whose_generator_was_killed(tmp_path, sft_model):
    run_dir = tmp_path / "run"
    config = _config(run_dir, sft_model, 1, run={"steps": 10})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "launch.cli", "run", "--restarts", "2", str(config)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        want = run_dir / "checkpoints" / f"step-{4:08d}" / "COMPLETE"
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not want.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(_pid_of_rank(config, 1), signal.SIGKILL)  # rank 1 is the generator: an OOM kill, say
        out, _ = proc.communicate(timeout=2 * JOB_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "mpirl: restart 1 of 2" in text and "rank 1 (generator) died" in text, text[-3000:]
    metrics = recipe.read_metrics(run_dir)
    assert [m["step"] for m in metrics] == list(range(10))  # every step, each once


@pytest.mark.slow
def test_a_crash_in_the_middle_of_a_save_leaves_the_previous_checkpoint(tmp_path, sft_model):
    run_dir = tmp_path / "run"
    config = _config(run_dir, sft_model, 0)
    # The trainers crash after writing their shards of checkpoint 4, before it is complete.
    with pytest.raises(RuntimeError, match="exited with"):
        recipe.run_job(config, timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env={"MPIRL_INJECT_FAULT": "trainer-saved:4"})
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step-00000002"
    assert (ckpts / ".step-00000004.partial" / "trainer").is_dir()  # half written, never visible
    recipe.run_job(config, timeout_s=JOB_TIMEOUT_S, quiet=True)  # resumes from step 2
    assert [m["step"] for m in recipe.read_metrics(run_dir)] == list(range(STEPS))
    assert not list(ckpts.glob(".*.partial"))  # the half-written one was cleared away


@pytest.mark.slow
def test_a_second_sigterm_aborts_at_once(tmp_path, sft_model):
    from runtime.preemption import EXIT_RESUMABLE

    run_dir = tmp_path / "run"
    config = _config(run_dir, sft_model, 1, run={"steps": 200})
    proc = _start_with_mpirl_run(config)
    try:
        _wait_for_steps(proc, run_dir, 2)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # "now"
        proc.communicate(timeout=120)
        stop_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode not in (0, EXIT_RESUMABLE) and stop_s < 30, (proc.returncode, stop_s)
    assert len(recipe.read_metrics(run_dir)) < 200


@pytest.mark.slow
def test_a_run_of_two_trainers_resumes_on_one(tmp_path, sft_model):
    # FSDP2 shards written by two trainers, loaded by one (torch.distributed.checkpoint reshards)
    from launch.tools.trace import read_spans, write_trace

    run_dir = tmp_path / "run"
    two = _config(run_dir, sft_model, 0, world={"trainer": 2})
    kill_after_checkpoint(two, run_dir, steps_done=4)
    # Killed: every rank's spans are on disk up to then (runtime/spans.py), and trace reads them.
    killed = read_spans(run_dir)
    assert [r["role"] for r in killed] == ["controller", "generator", "reward", "trainer", "trainer"]
    assert all("start.build" in [s["name"] for s in r["spans"]] for r in killed)
    write_trace(run_dir)
    one = _config(run_dir, sft_model, 0, world={"trainer": 1})
    recipe.run_job(one, timeout_s=JOB_TIMEOUT_S, quiet=True)
    metrics = recipe.read_metrics(run_dir)
    assert [m["step"] for m in metrics] == list(range(STEPS))
    assert [m["policy_version"] for m in metrics] == list(range(1, STEPS + 1))
    # Resumed on one rank fewer: the trace is this start's alone, each span once, the second
    # trainer's file gone.
    resumed = read_spans(run_dir)
    assert [r["role"] for r in resumed] == ["controller", "generator", "reward", "trainer"]
    killed_end = max(s["end"] for r in killed for s in r["spans"])
    for r in resumed:
        names = [s["name"] for s in r["spans"]]
        assert names.count("start.python") == names.count("stop.mailbox_close") == 1, names
        assert min(s["start"] for s in r["spans"]) > killed_end
