"""launch/resume.py: which checkpoint a run continues from, and the changes, damage and data
rewrites that refuse it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from launch import config
from launch.resume import check_data, find_resume, fresh_start_notice
from roles.prompt_stream import PromptStream, fingerprint
from support.checkpoints import run_config, write_checkpoint


def test_resume_auto_finds_the_newest_and_never_ignores_it(base_config, tmp_path):
    cfg = run_config(base_config, tmp_path)
    assert find_resume(cfg) is None  # nothing yet: start afresh
    plan = cfg.checkpoints()
    write_checkpoint(plan, 2)
    write_checkpoint(plan, 4)
    found = find_resume(cfg)
    assert found.steps_done == 4 and found.path.endswith("step-00000004")
    assert find_resume(run_config(base_config, tmp_path, **{"run.resume": "never"})) is None
    explicit = run_config(base_config, tmp_path, **{"run.resume": str(tmp_path / "run/checkpoints/step-00000002")})
    assert find_resume(explicit).steps_done == 2


def test_resume_refuses_a_changed_seed_or_task_and_allows_more_steps(base_config, tmp_path):
    write_checkpoint(run_config(base_config, tmp_path).checkpoints(), 2)
    assert find_resume(run_config(base_config, tmp_path, **{"run.steps": 99})).steps_done == 2
    with pytest.raises(config.ConfigError, match=r"run\.seed: differs from the checkpoint"):
        find_resume(run_config(base_config, tmp_path, **{"run.seed": 5}))
    with pytest.raises(config.ConfigError, match=r"task: differs"):
        find_resume(run_config(base_config, tmp_path, **{"task.max_operand": 7}))


def test_resume_refuses_fewer_steps_than_the_checkpoint_has_done(base_config, tmp_path):
    # Resumed, nothing would be trained and the policy and summary would be step 4's, not 3's.
    plan = run_config(base_config, tmp_path).checkpoints()
    write_checkpoint(plan, 2)
    write_checkpoint(plan, 4)
    assert find_resume(run_config(base_config, tmp_path, **{"run.steps": 4})).steps_done == 4  # done: fine
    with pytest.raises(config.ConfigError, match=r"run\.steps \(3\) is below the 4 steps .*step-00000002 \(an earlier"):
        find_resume(run_config(base_config, tmp_path, **{"run.steps": 3}))
    with pytest.raises(config.ConfigError, match=r"run\.steps \(1\) is below .*set run\.resume: never"):
        find_resume(run_config(base_config, tmp_path, **{"run.steps": 1}))


def _prompts(n, changed=None):
    return {i: np.array([1, 2, 100 + i if i != changed else 7], dtype=np.int32) for i in range(10, 10 + n)}


def test_resume_refuses_training_files_rewritten_since_the_checkpoint(base_config, tmp_path):
    # The same role map over files rewritten in place: the data position indexes other prompts
    # (once crashed the controller after every model was loaded, or went on over other rows).
    cfg = run_config(base_config, tmp_path)
    prompts = _prompts(6)
    stream = PromptStream(prompts, seed=0, digest=fingerprint(prompts))
    stream.take(4)
    write_checkpoint(cfg.checkpoints(), 2, {"position": {"stream": stream.position()}, "next_eval_group": 0})
    resume = find_resume(cfg)
    check_data(cfg, resume, _prompts(6))  # the same prompts: resumes
    changed = r"task: the training data changed since checkpoint .*step-00000002 was written: "
    with pytest.raises(
        config.ConfigError, match=changed + "the checkpoint's data position covers 6 examples, the task now has 5"
    ):
        check_data(cfg, resume, _prompts(5))
    with pytest.raises(config.ConfigError, match=changed + "the 6 training prompts are not the ones"):
        check_data(cfg, resume, _prompts(6, changed=12))
    with pytest.raises(ValueError, match="training data changed"):  # the controller's own guard
        changed = _prompts(6, changed=12)
        PromptStream(changed, seed=0, digest=fingerprint(changed)).restore(stream.position())


def test_a_data_position_saved_without_a_fingerprint_is_checked_by_its_count(base_config, tmp_path):
    cfg = run_config(base_config, tmp_path)
    position = PromptStream(range(10, 16), seed=0).position()  # as checkpoints before the fingerprint
    del position["data"]
    write_checkpoint(cfg.checkpoints(), 2, {"position": {"stream": position}, "next_eval_group": 0})
    resume = find_resume(cfg)
    check_data(cfg, resume, _prompts(6, changed=12))
    with pytest.raises(config.ConfigError, match="covers 6 examples, the task now has 7"):
        check_data(cfg, resume, _prompts(7))


def test_a_fresh_start_over_logged_steps_warns_that_the_logs_are_replaced(base_config, tmp_path):
    # Raising run.steps of a finished run that wrote no checkpoint starts it again from step 0:
    # said at the start, not found afterwards in a metrics.jsonl that was replaced.
    cfg = run_config(base_config, tmp_path, **{"checkpoint.every_steps": 0})
    assert fresh_start_notice(cfg, None) is None  # nothing logged yet
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(3)))
    assert "holds 3 steps logged by an earlier start, but checkpoints are off" in fresh_start_notice(cfg, None)
    cfg = run_config(base_config, tmp_path)
    assert "no complete checkpoint in" in fresh_start_notice(cfg, None)
    assert "run.resume is never" in fresh_start_notice(
        run_config(base_config, tmp_path, **{"run.resume": "never"}), None
    )
    write_checkpoint(cfg.checkpoints(), 2)
    assert fresh_start_notice(cfg, find_resume(cfg)) is None  # it continues: nothing is replaced


def test_resume_from_a_path_that_is_no_checkpoint_is_a_config_error(base_config, tmp_path):
    cfg = run_config(base_config, tmp_path, **{"run.resume": str(tmp_path / "nowhere")})
    with pytest.raises(config.ConfigError, match="run.resume: .* is not a complete checkpoint"):
        find_resume(cfg)


@pytest.mark.parametrize(
    ("file", "content", "what"),
    [
        ("controller.json", b'{"broken\n', r"controller\.json: damaged \(not valid JSON: Invalid control character"),
        ("controller.json", b"", r"controller\.json: damaged \(not valid JSON"),
        ("controller.json", b"[1, 2]", r"controller\.json: damaged \(a JSON list, not an object\)"),
        ("controller.json", b'{"steps_done": "4"}', r"controller\.json: damaged \(steps_done is '4'"),
        ("controller.json", b'{"steps_done": 3, "position": {}, "next_eval_group": 0}', r"but the folder is step-0+4"),
        ("controller.json", b'{"steps_done": 4}', r"controller\.json: damaged \(no 'position' in it\)"),
        ("controller.json", b"\xff\xfe\x00", r"controller\.json: damaged \(not text"),
        ("config.yaml", b"model: [unclosed\n", r"config\.yaml: damaged \(not valid YAML"),
        ("config.yaml", b"just text\n", r"config\.yaml: damaged \(not a role map but a str\)"),
        ("rng/rank-00000.pkl", b"\x80\x05garbage", r"rank-00000\.pkl: damaged \(UnpicklingError"),
        ("rng/rank-00000.pkl", b"", r"rank-00000\.pkl: damaged \(EOFError"),
        ("trainer/.metadata", None, r"trainer/\.metadata: missing \(the trainers' shards are not all there\)"),
    ],
)
def test_a_damaged_file_of_the_newest_checkpoint_is_a_config_error_naming_it(
    base_config, tmp_path, file, content, what
):
    cfg = run_config(base_config, tmp_path)
    plan = cfg.checkpoints()
    write_checkpoint(plan, 2)
    newest = write_checkpoint(plan, 4)
    if content is None:
        (newest / file).unlink()
    else:
        (newest / file).write_bytes(content)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(config.ConfigError, match=what) as e:
        find_resume(cfg)
    message = str(e.value)
    assert f"checkpoint {newest} cannot be resumed: {newest / file}: " in message
    assert f"run.resume: {newest.parent / 'step-00000002'} (the one before)" in message
    assert "run.resume: never" in message
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing removed
    # the one before resumes
    assert find_resume(run_config(base_config, tmp_path, **{"run.resume": str(newest.parent / "step-00000002")}))


def test_a_lora_checkpoint_whose_base_changed_or_is_gone_is_a_config_error(base_config, dummy_model, tmp_path):
    """A LoRA checkpoint holds the adapters only: resuming reads the base from model.path, which
    must be the one recorded (roles/checkpoint/lora_base.py)."""
    from roles.checkpoint.lora_base import BASE_RECORD, record_base

    cfg = run_config(base_config, tmp_path)
    path = write_checkpoint(cfg.checkpoints(), 2)
    record_base(path, dummy_model)
    assert find_resume(cfg).steps_done == 2  # the base as it was
    record = json.loads((path / BASE_RECORD).read_text())
    name = next(iter(record["tensors"]))
    record["tensors"][name][1] = [*record["tensors"][name][1], 2]  # trained on another shape
    (path / BASE_RECORD).write_text(json.dumps(record))
    with pytest.raises(
        config.ConfigError, match=rf"model\.path: .*not the one its adapters were trained on: {name} was"
    ):
        find_resume(cfg)


def test_turning_partial_rollouts_and_dynamic_sampling_off_across_a_resume_is_refused(base_config, tmp_path):
    """Their checkpoints' data position is past examples still in flight (``carry``), which only a
    run with a slot book hands out again: with both off they would be skipped."""
    ahead = {"rollout.mode": "stream", "rollout.oversample": 0.5}
    write_checkpoint(run_config(base_config, tmp_path, **ahead).checkpoints(), 2)
    with pytest.raises(config.ConfigError, match=r"rollout\.oversample, rollout\.dynamic_sampling: .*oversample 0\.5"):
        find_resume(run_config(base_config, tmp_path, **{"rollout.mode": "stream"}))
    assert find_resume(run_config(base_config, tmp_path, **{**ahead, "rollout.oversample": 0.25})).steps_done == 2
    dynamic = {"rollout.mode": "stream", "rollout.dynamic_sampling": True}
    assert find_resume(run_config(base_config, tmp_path, **dynamic)).steps_done == 2  # the other one on: kept


def test_turning_partial_rollouts_on_across_a_resume_is_allowed(base_config, tmp_path):
    write_checkpoint(run_config(base_config, tmp_path).checkpoints(), 2)
    ahead = {"rollout.mode": "stream", "rollout.oversample": 0.5}
    assert find_resume(run_config(base_config, tmp_path, **ahead)).steps_done == 2
