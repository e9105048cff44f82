"""TensorBoard and W&B as the controller feeds them: what lands on disk, read back by their own readers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from roles.observe.backends import open_backends
from roles.observe.metric_names import step_scalars
from roles.observe.run_log import RunLog
from roles.sections.observability import LoggingConfig
from support.paths import REPO
from support.run_records import step_record, tensorboard_scalars, wandb_history

SHOWN = [
    {"step": 1, "policy_version": 1, "example_id": 3, "group_id": 5, "sample": 0, "prompt": "2+2=", "response": "4",
     "reward": 1.0, "components": {"correct": 1.0}, "finish_reason": "stop"},
]  # fmt: skip


def feed(log: RunLog, steps, reward_of=lambda s: 0.25 * s) -> list[dict]:
    records = [step_record(s, reward=reward_of(s)) for s in steps]
    for r in records:
        log.step(r, shown=SHOWN if r["step"] == 1 else [])
    return records


def test_tensorboard_holds_the_same_numbers_as_metrics_jsonl(tmp_path):
    log = RunLog(tmp_path, evaluation=True, backends=open_backends(LoggingConfig(tensorboard=True), tmp_path, {}))
    records = feed(log, range(4))
    ev = {"eval_round": 0, "step": 4, "policy_version": 4, "pass@1": 0.375, "pass@4": 0.5, "examples": 8}
    log.eval(ev)
    log.close()
    got = tensorboard_scalars(tmp_path / "tensorboard")
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert json.dumps(lines) == json.dumps(records)  # (NaN == NaN is False: compared as text)
    for r in lines:
        for name, value in step_scalars(r).items():
            assert got[name][r["step"]] == pytest.approx(value, rel=1e-6), name  # float32 in the event file
    for name in ("reward/mean", "train/loss", "timing/generate_s", "busy/generator", "perf/tokens_per_s"):
        assert sorted(got[name]) == [0, 1, 2, 3], name
    assert got["eval/pass@1"] == {4: 0.375} and got["eval/pass@4"] == {4: 0.5}

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    (text,) = acc.Tensors("samples/text_summary")
    assert text.step == 1 and "2+2=" in text.tensor_proto.string_val[0].decode()


def test_tensorboard_logging_does_not_import_torch(tmp_path):
    """The controller writes TensorBoard's files and otherwise never imports torch (start-up)."""
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from roles.sections.observability import LoggingConfig
        from roles.observe.backends import open_backends
        (tb,) = open_backends(LoggingConfig(tensorboard=True), Path({str(tmp_path)!r}), {{}})
        tb.log_step({{"step": 0}}); tb.log_samples(0, []); tb.close()
        assert "torch" not in sys.modules, "torch was imported"
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_tensorboard_after_a_resume_shows_each_step_once(tmp_path):
    log = RunLog(tmp_path, evaluation=False, backends=open_backends(LoggingConfig(tensorboard=True), tmp_path, {}))
    feed(log, range(6))  # the crashed run logged steps 0-5; its checkpoint holds 3 steps
    log.close()
    resumed = open_backends(LoggingConfig(tensorboard=True), tmp_path, {}, resumed_at=3)
    log = RunLog(tmp_path, evaluation=False, resumed_at=3, backends=resumed)
    feed(log, range(3, 6), reward_of=lambda s: 10.0 + s)  # the steps run again, with other numbers
    log.close()
    got = tensorboard_scalars(tmp_path / "tensorboard")["reward/mean"]
    assert got == {0: 0.0, 1: 0.25, 2: 0.5, 3: 13.0, 4: 14.0, 5: 15.0}


# W&B offline, in a process of its own with no network but its own loopback (wandb's service
# talks to the library over a local socket): nothing can leave the machine.
WANDB_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from roles.sections.observability import LoggingConfig, WandbConfig
    from roles.observe.backends import open_backends
    from roles.observe.run_log import RunLog
    from support.run_records import step_record
    out = Path(sys.argv[1])
    resumed_at = int(sys.argv[3])
    cfg = LoggingConfig(wandb=WandbConfig(project="mpirl-test", mode="offline"))
    log = RunLog(out, evaluation=True, resumed_at=resumed_at or None,
                 backends=open_backends(cfg, out, {"run": {"steps": 4}}, resumed_at))
    for s in range(resumed_at, 4):
        log.step(step_record(s, reward=0.25 * s),
                 shown=[{"step": s, "policy_version": s, "example_id": 1, "group_id": 2, "sample": 0,
                         "prompt": "1+1=", "response": "2", "reward": 1.0, "components": {}, "finish_reason": "stop"}])
    log.eval({"eval_round": 0, "step": 4, "policy_version": 4, "pass@1": 0.375, "examples": 8})
    log.close()
    """
)


def run_isolated(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    """``argv`` in a network namespace of its own (loopback only) when this machine allows it."""
    isolated = shutil.which("unshare") and os.geteuid() == 0
    if isolated:
        probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
        isolated = probe.returncode == 0
    if isolated:
        shell = "ip link set lo up 2>/dev/null || true; exec " + " ".join(f"'{a}'" for a in argv)
        argv = ["unshare", "--net", "sh", "-c", shell]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.timeout(300)
def test_wandb_offline_writes_a_run_with_the_same_numbers(tmp_path):
    script = tmp_path / "feed_wandb.py"
    script.write_text(WANDB_SCRIPT)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONPATH": str(REPO / "tests")}
    env.pop("WANDB_API_KEY", None)
    done = run_isolated([sys.executable, str(script), str(tmp_path), str(REPO), "0"], env)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    (run_file,) = run_dir.glob("run-*.wandb")
    rows = wandb_history(run_file)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["trainer_step"] for r in steps] == [0, 1, 2, 3]
    for row, line in zip(steps, lines, strict=True):
        for name, value in step_scalars(line).items():
            assert row[name] == pytest.approx(value), name
    (ev,) = [r for r in rows if "eval/pass@1" in r]
    assert ev["trainer_step"] == 4 and ev["eval/pass@1"] == 0.375
    tables = [r for r in rows if "samples/_type" in r]
    assert len(tables) == 4 and all(t["samples/nrows"] == 1 and t["samples/ncols"] == 7 for t in tables)
    assert [t["trainer_step"] for t in tables] == [0, 1, 2, 3]  # one table per step, at its step
    assert (tmp_path / "wandb_run_id").read_text().strip() == run_file.stem.removeprefix("run-")


@pytest.mark.timeout(300)
def test_wandb_after_a_resume_continues_the_same_run(tmp_path):
    script = tmp_path / "feed_wandb.py"
    script.write_text(WANDB_SCRIPT)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONPATH": str(REPO / "tests")}
    for resumed_at in ("0", "2"):  # a run, then its resume from a checkpoint of 2 steps
        done = run_isolated([sys.executable, str(script), str(tmp_path), str(REPO), resumed_at], env)
        assert done.returncode == 0, done.stderr[-3000:]
    run_id = (tmp_path / "wandb_run_id").read_text().strip()
    files = sorted((tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 2  # both parts under the one run id: `wandb sync` joins them
    resumed = [r["trainer_step"] for r in wandb_history(files[-1]) if "reward/mean" in r]
    assert resumed == [2, 3]
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2, 3]
