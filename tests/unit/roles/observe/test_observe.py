"""Seeing a run: metric names, shown samples, the progress display, the run log and its backends."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from roles.observe import backends as backends_lib
from roles.observe.backends import BackendError, open_backends, samples_markdown
from roles.observe.metric_names import eval_scalars, step_scalars
from roles.observe.progress import Progress, launcher_env, progress_mode
from roles.observe.run_log import RunLog
from roles.observe.samples import shown_samples
from roles.sections.observability import LoggingConfig
from support.run_records import step_record

# ------------------------------------------------------------------ metric names


def test_step_scalars_are_grouped_and_equal_to_the_line():
    s = step_scalars(step_record(3, reward=0.75))
    assert s["reward/mean"] == 0.75 and s["reward/arith_exact"] == 0.75 and s["reward/correct"] == 0.375
    assert s["response/length_mean"] == 6.5 and s["response/clip_ratio"] == 0.125
    assert s["train/loss"] == pytest.approx(-0.3) and s["train/grad_norm"] == 1.5
    assert s["train/ratio_clip_frac"] == 0.01 and s["train/ratio_max"] == 2.5
    assert s["timing/generate_s"] == 0.5 and s["timing/train_s"] == 0.3 and s["timing/weight_sync_s"] == 0.01
    assert s["busy/generator"] == 0.25 and s["busy/trainer"] == 0.155
    assert s["staleness/mean"] == 0.5 and s["perf/tokens_per_s"] == 200.0
    # What no dashboard can plot is left out, not sent as 0: None, NaN.
    assert "timing/checkpoint_save_s" not in s and "train/kl_mu_pi" not in s
    assert all(isinstance(v, float) and math.isfinite(v) for v in s.values())


def test_the_dynamic_sampling_block_is_plotted_with_the_bound_as_a_number():
    rec = {**step_record(3), "dynamic_sampling": {"filtered_groups": 5, "drop_rate": 0.4, "refill_bound_reached": True}}
    s = step_scalars(rec)
    assert s["dynamic_sampling/filtered_groups"] == 5.0 and s["dynamic_sampling/refill_bound_reached"] == 1.0
    assert s["dynamic_sampling/drop_rate"] == 0.4


def test_eval_scalars_take_every_figure_of_the_round():
    rec = {"eval_round": 1, "step": 4, "policy_version": 4, "sampled_versions": [4], "pass@1": 0.3, "pass@4": 0.5,
           "mean@4": 0.25, "examples": 20, "elapsed_s": 9.0}  # fmt: skip
    assert eval_scalars(rec) == {"eval/pass@1": 0.3, "eval/pass@4": 0.5, "eval/mean@4": 0.25, "eval/examples": 20.0}


# ------------------------------------------------------------------ shown samples


@pytest.mark.parametrize("P,S,N", [(4, 3, 6), (4, 3, 12), (8, 1, 3), (5, 4, 0), (3, 2, 4)])
def test_shown_samples_spread_over_the_prompts_and_add_up(P, S, N):
    picked = {p: shown_samples(p, P, S, N) for p in range(P)}
    assert sum(len(v) for v in picked.values()) == min(N, P * S)
    # Prompts first: no prompt shows a second sample while another shows none.
    counts = [len(v) for v in picked.values()]
    assert max(counts, default=0) - min(counts, default=0) <= 1
    assert all(v == list(range(len(v))) for v in picked.values())


def test_samples_markdown_escapes_what_would_break_the_table():
    text = samples_markdown(
        [{"prompt": "a|b", "response": "x\ny | `z`", "reward": 1.0, "policy_version": 2, "finish_reason": "stop"}]
    )
    row = text.splitlines()[2]
    assert row.count(" | ") == 4  # five cells: the pipes inside cells are escaped
    assert "a\\|b" in row and "x<br>y \\| `z`" in row


# ------------------------------------------------------------------ progress


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_off_a_terminal_prints_plain_lines_every_interval():
    out, clock = io.StringIO(), FakeClock()
    p = Progress(10, every_s=3.0, stream=out, clock=clock)
    for step in range(10):
        clock.t += 1.0
        p.step(step_record(step))
        if step == 4:
            p.eval({"eval_round": 0, "policy_version": 5, "pass@1": 0.4, "pass@4": 0.6, "examples": 20})
    p.close({"steps": 10, "wall_s": 10.0, "train_reward_first10": 0.5, "train_reward_last10": 0.5})
    text = out.getvalue()
    assert "\r" not in text  # no redraws in a log file
    steps = [line for line in text.splitlines() if line.startswith("mpirl: step ")]
    # The first step, then one line per 3 s of clock, and the last step.
    assert [line.split()[2] for line in steps] == ["1/10", "4/10", "7/10", "10/10"]
    assert "reward 0.500" in steps[-1] and "200 tok/s" in steps[-1] and "eta 0m00s" in steps[-1]
    assert "eval pass@1 0.400" in steps[-1]  # the bar's figures carry the last eval
    assert any("eval 0 (policy version 5): pass@1 0.400  pass@4 0.600 on 20 examples" in x for x in text.splitlines())
    assert text.splitlines()[-1].startswith("mpirl: done: 10 steps")


def test_progress_on_a_terminal_redraws_a_bar():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    p = Progress(4, stream=out, mode="bar")
    for step in range(4):
        p.step(step_record(step))
    p.close()
    assert "\r" in out.getvalue() and "4/4" in out.getvalue() and "reward 0.500" in out.getvalue()


def test_the_progress_mode_follows_the_launcher():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert progress_mode(Terminal(), {}) == "bar" and progress_mode(io.StringIO(), {}) == "lines"
    # Under Open MPI a rank's stdout is mpirun's pty, a terminal or not: lines, unless told.
    assert progress_mode(Terminal(), {"OMPI_COMM_WORLD_SIZE": "4"}) == "lines"
    assert progress_mode(io.StringIO(), {"OMPI_COMM_WORLD_SIZE": "4", "MPIRL_PROGRESS": "bar"}) == "bar"
    assert progress_mode(Terminal(), {"MPIRL_PROGRESS": "lines"}) == "lines"
    # What a launcher passes on: its own stdout decides.
    assert launcher_env(io.StringIO()) == {"MPIRL_PROGRESS": "lines"}
    told = launcher_env(Terminal())
    assert told["MPIRL_PROGRESS"] == "bar" and int(told["COLUMNS"]) > 0


def test_a_resumed_runs_progress_starts_at_its_checkpoint():
    out, clock = io.StringIO(), FakeClock()
    p = Progress(10, initial=6, every_s=100.0, stream=out, clock=clock)
    clock.t = 4.0
    p.step(step_record(7))  # steps 6 and 7 took 4 s: 2 s a step, 2 steps left
    assert "step 8/10" in out.getvalue() and "eta 0m04s" in out.getvalue()


# ------------------------------------------------------------------ the run log


class Recorder:
    def __init__(self, fail_on=None):
        self.calls, self.fail_on = [], fail_on

    def __getattr__(self, name):
        if name.startswith("log_") or name == "close":

            def record(*args):
                if name == self.fail_on:
                    raise OSError("disk full")
                self.calls.append((name, args))

            return record
        raise AttributeError(name)


def test_a_dashboard_that_fails_is_dropped_and_the_files_keep_every_step(tmp_path, capsys):
    good, bad = Recorder(), Recorder(fail_on="log_step")
    log = RunLog(tmp_path, evaluation=True, backends=[bad, good])
    for step in range(3):
        log.step(step_record(step), shown=[{"step": step, "sample": 0}] if step == 1 else [])
    log.eval({"eval_round": 0, "policy_version": 3, "pass@1": 0.5})
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2]
    assert [json.loads(x)["step"] for x in (tmp_path / "samples.jsonl").read_text().splitlines()] == [1]
    assert [c[0] for c in good.calls] == ["log_step", "log_step", "log_samples", "log_step", "log_eval", "close"]
    assert bad not in log.backends and "Recorder failed (OSError: disk full)" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="Linux: /dev/full")
def test_a_full_disk_names_the_log_file_it_could_not_write(tmp_path):
    log = RunLog(tmp_path, evaluation=False)
    log._metrics.close()
    log._metrics = open("/dev/full", "w")  # every write: ENOSPC, as on a full disk
    with pytest.raises(OSError, match="No space left on device: writing /dev/full"):
        log.step(step_record(0))


def test_a_resumed_run_log_drops_the_lines_past_its_checkpoint(tmp_path):
    log = RunLog(tmp_path, evaluation=True)
    for step in range(5):
        log.step(step_record(step), shown=[{"step": step, "sample": 0}])
    log.eval({"eval_round": 0, "policy_version": 2, "pass@1": 0.5})
    log.eval({"eval_round": 1, "policy_version": 4, "pass@1": 0.6})
    log.close()
    again = RunLog(tmp_path, evaluation=True, resumed_at=3)
    assert [r["step"] for r in again.history] == [0, 1, 2] and [e["policy_version"] for e in again.evals] == [2]
    again.step(step_record(3), shown=[{"step": 3, "sample": 0}])
    again.close()
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    shown = [json.loads(x)["step"] for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3] and shown == [0, 1, 2, 3]


# ------------------------------------------------------------------ backends: checks


def test_a_missing_backend_package_is_a_config_error_naming_it(monkeypatch, base_config):
    import copy

    from launch import config, preflight

    real = backends_lib.importlib.util.find_spec
    monkeypatch.setattr(
        backends_lib.importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    raw = copy.deepcopy(base_config)
    raw["logging"] = {"wandb": {"project": "p"}}
    with pytest.raises(config.ConfigError, match=r"logging.*wandb.*'wandb' package is not installed"):
        preflight.parse(raw)


def test_logging_settings_that_cannot_work_are_refused(base_config):
    import copy

    from launch import config

    for bad, match in [
        ({"samples_per_step": 10**6}, "samples_per_step"),
        ({"wandb": {"project": "p", "mode": "cloud"}}, "mode"),
        ({"wandb": {"project": ""}}, "project"),
        ({"tensorboard": "yes"}, "tensorboard"),
        ({"progress_every_s": 0}, "progress_every_s"),
    ]:
        raw = copy.deepcopy(base_config)
        raw["logging"] = bad
        with pytest.raises(config.ConfigError, match=match):
            config.parse(raw)
    raw = copy.deepcopy(base_config)
    per_step = raw["rollout"]["prompts_per_step"] * raw["rollout"]["samples_per_prompt"]
    raw["logging"] = {"samples_per_step": per_step + 1}
    with pytest.raises(config.ConfigError, match=f"exceeds the {per_step} generations of a step"):
        config.parse(raw)


def test_a_backend_that_cannot_start_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(BackendError, match="logging.tensorboard: could not start"):
        open_backends(LoggingConfig(tensorboard=True), blocker, {})
