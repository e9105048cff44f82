"""The parts of a checkpoint that need no MPI: files, atomic visibility, RNG streams, the data
position, the resume rules."""

from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from launch import config
from launch.resume import check_data, find_resume, fresh_start_notice
from roles import checkpoint
from roles.prompt_stream import PromptStream, fingerprint


def _plan(tmp_path, text="x: 1\n", keep=2):
    return checkpoint.CheckpointPlan(str(tmp_path / "ckpt"), keep, text)


def _write(plan, steps, state=None):
    part = plan.write_controller_part(steps, state or {"position": {}, "next_eval_group": 0})
    (part / "trainer").mkdir(exist_ok=True)
    (part / "trainer" / ".metadata").write_bytes(b"the trainers' shard index (not read by these checks)")
    return plan.finalize(steps)


def test_random_streams_continue_after_a_round_trip(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    checkpoint.save_rng(tmp_path, 7)
    want = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    assert checkpoint.load_rng(tmp_path, 7)
    assert (random.random(), np.random.rand()) == want[:2] and torch.equal(torch.rand(3), want[2])
    assert not checkpoint.load_rng(tmp_path, 8)  # a rank it never had: nothing restored


def test_random_states_of_checkpoints_from_earlier_versions_still_load(tmp_path):
    """Earlier versions wrote each rank's states with torch.save, the torch state a tensor."""
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    old = tmp_path / "rng" / "rank-00007.pt"
    old.parent.mkdir()
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}, old)
    want = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    assert checkpoint.load_rng(tmp_path, 7)
    assert (random.random(), np.random.rand()) == want[:2] and torch.equal(torch.rand(3), want[2])


def test_a_rank_without_torch_saves_and_restores_its_states_without_importing_it(tmp_path):
    script = f"""
import random, sys
import numpy as np
from roles import checkpoint
random.seed(1); np.random.seed(2)
checkpoint.save_rng({str(tmp_path)!r}, 3)
want = (random.random(), float(np.random.rand()))
random.seed(9); np.random.seed(9)
assert checkpoint.load_rng({str(tmp_path)!r}, 3)
assert (random.random(), float(np.random.rand())) == want
assert "torch" not in sys.modules, "torch was imported"
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # A rank that holds torch restores from the same file what the torch-free one saved.
    random.seed(9)
    assert checkpoint.load_rng(tmp_path, 3)


def test_the_data_position_continues_the_same_sequence(tmp_path):
    whole = PromptStream(range(10, 23), seed=4)
    first = whole.take(9)
    checkpoint.write_json(tmp_path / "pos.json", whole.position())
    pos = json.loads((tmp_path / "pos.json").read_text())  # it travels as JSON
    rest = whole.take(30)  # across two epochs
    resumed = PromptStream(range(10, 23), seed=4)
    resumed.restore(pos)
    assert resumed.take(30) == rest
    assert sorted(first + rest[:4]) == list(range(10, 23))  # an epoch is every example once
    with pytest.raises(ValueError, match="training data changed"):
        PromptStream(range(5), seed=4).restore(pos)


def test_a_checkpoint_becomes_visible_only_when_complete(tmp_path):
    plan = _plan(tmp_path)
    _write(plan, 2)
    plan.write_controller_part(4, {"position": {}, "next_eval_group": 0})  # a save that never finished
    assert checkpoint.newest(plan.root).name == "step-00000002"
    assert (tmp_path / "ckpt" / "latest").read_text().strip() == "step-00000002"
    checkpoint.remove_partials(plan.root)
    assert not list((tmp_path / "ckpt").glob(".*.partial"))
    assert checkpoint.newest(plan.root).name == "step-00000002"


def test_old_checkpoints_go_only_after_a_newer_is_complete(tmp_path):
    plan = _plan(tmp_path, keep=2)
    for s in (2, 4, 6):
        _write(plan, s)
    assert [p.name for p in checkpoint.complete_checkpoints(plan.root)] == ["step-00000004", "step-00000006"]
    assert checkpoint.steps_done(checkpoint.newest(plan.root)) == 6


@pytest.mark.parametrize("overwrite", [False, True], ids=["pruned", "same-step-rewritten"])
def test_a_crash_while_removing_a_checkpoint_leaves_no_complete_but_gutted_one(tmp_path, monkeypatch, overwrite):
    """kill -9 in the middle of deleting a checkpoint (keep_last's pruning, or the one of the same
    step a run resumed from an older checkpoint writes again): COMPLETE may outlive the shards
    in a plain rmtree. Removed by rename first, the folder is never a candidate for resume."""
    plan = _plan(tmp_path, keep=2)
    _write(plan, 2)
    _write(plan, 4)

    rmtree = shutil.rmtree

    def crash_midway(path, ignore_errors=False):  # the shards go, COMPLETE stays, then the kill
        rmtree(Path(path) / "trainer")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.shutil, "rmtree", crash_midway)
    with pytest.raises(KeyboardInterrupt):
        _write(plan, 4 if overwrite else 6)
    monkeypatch.undo()
    for done in checkpoint.complete_checkpoints(plan.root):
        assert (done / "trainer" / ".metadata").is_file(), f"{done.name} is complete but has no shards"
    assert checkpoint.is_complete(checkpoint.resolve(plan.root))  # what export and run.resume: DIR take
    checkpoint.remove_partials(plan.root)  # the next start clears what the crash left
    assert not [p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith(".step-")]


def test_logs_keep_each_step_once(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(6)) + '{"step": 6, "cut')
    kept = checkpoint.keep_jsonl(log, lambda r: r["step"] < 4)
    assert [r["step"] for r in kept] == [0, 1, 2, 3]
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [0, 1, 2, 3]


def _run_config(base_config, tmp_path, **changes):
    raw = copy.deepcopy(base_config)
    raw["run"]["out"] = str(tmp_path / "run")
    raw["run"]["steps"] = 8  # beyond the checkpoints these tests write
    raw["checkpoint"] = {"every_steps": 2}
    for dotted, value in changes.items():
        *path, key = dotted.split(".")
        node = raw
        for p in path:
            node = node.setdefault(p, {})
        node[key] = value
    return config.parse(raw)


def test_resume_auto_finds_the_newest_and_never_ignores_it(base_config, tmp_path):
    cfg = _run_config(base_config, tmp_path)
    assert find_resume(cfg) is None  # nothing yet: start afresh
    plan = cfg.checkpoints()
    _write(plan, 2)
    _write(plan, 4)
    found = find_resume(cfg)
    assert found.steps_done == 4 and found.path.endswith("step-00000004")
    assert find_resume(_run_config(base_config, tmp_path, **{"run.resume": "never"})) is None
    explicit = _run_config(base_config, tmp_path, **{"run.resume": str(tmp_path / "run/checkpoints/step-00000002")})
    assert find_resume(explicit).steps_done == 2


def test_a_run_folder_or_its_checkpoint_folder_names_its_newest(base_config, tmp_path):
    cfg = _run_config(base_config, tmp_path)
    plan = cfg.checkpoints()
    _write(plan, 2)
    newest = _write(plan, 4)
    run = tmp_path / "run"
    assert checkpoint.resolve(run) == checkpoint.resolve(run / "checkpoints") == newest
    assert checkpoint.resolve(newest) == newest
    assert checkpoint.resolve(tmp_path) == tmp_path  # neither: itself, refused by its caller
    assert find_resume(_run_config(base_config, tmp_path, **{"run.resume": str(run)})).steps_done == 4


def test_resume_refuses_a_changed_seed_or_task_and_allows_more_steps(base_config, tmp_path):
    _write(_run_config(base_config, tmp_path).checkpoints(), 2)
    assert find_resume(_run_config(base_config, tmp_path, **{"run.steps": 99})).steps_done == 2
    with pytest.raises(config.ConfigError, match=r"run\.seed: differs from the checkpoint"):
        find_resume(_run_config(base_config, tmp_path, **{"run.seed": 5}))
    with pytest.raises(config.ConfigError, match=r"task: differs"):
        find_resume(_run_config(base_config, tmp_path, **{"task.max_operand": 7}))


def test_resume_refuses_fewer_steps_than_the_checkpoint_has_done(base_config, tmp_path):
    # Resumed, nothing would be trained and the policy and summary would be step 4's, not 3's.
    plan = _run_config(base_config, tmp_path).checkpoints()
    _write(plan, 2)
    _write(plan, 4)
    assert find_resume(_run_config(base_config, tmp_path, **{"run.steps": 4})).steps_done == 4  # done: fine
    with pytest.raises(config.ConfigError, match=r"run\.steps \(3\) is below the 4 steps .*step-00000002 \(an earlier"):
        find_resume(_run_config(base_config, tmp_path, **{"run.steps": 3}))
    with pytest.raises(config.ConfigError, match=r"run\.steps \(1\) is below .*set run\.resume: never"):
        find_resume(_run_config(base_config, tmp_path, **{"run.steps": 1}))


def _prompts(n, changed=None):
    return {i: np.array([1, 2, 100 + i if i != changed else 7], dtype=np.int32) for i in range(10, 10 + n)}


def test_resume_refuses_training_files_rewritten_since_the_checkpoint(base_config, tmp_path):
    # The same role map over files rewritten in place: the data position indexes other prompts
    # (once crashed the controller after every model was loaded, or went on over other rows).
    cfg = _run_config(base_config, tmp_path)
    prompts = _prompts(6)
    stream = PromptStream(prompts, seed=0, digest=fingerprint(prompts))
    stream.take(4)
    _write(cfg.checkpoints(), 2, {"position": {"stream": stream.position()}, "next_eval_group": 0})
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
    cfg = _run_config(base_config, tmp_path)
    position = PromptStream(range(10, 16), seed=0).position()  # as checkpoints before the fingerprint
    del position["data"]
    _write(cfg.checkpoints(), 2, {"position": {"stream": position}, "next_eval_group": 0})
    resume = find_resume(cfg)
    check_data(cfg, resume, _prompts(6, changed=12))
    with pytest.raises(config.ConfigError, match="covers 6 examples, the task now has 7"):
        check_data(cfg, resume, _prompts(7))


def test_a_fresh_start_over_logged_steps_warns_that_the_logs_are_replaced(base_config, tmp_path):
    # Raising run.steps of a finished run that wrote no checkpoint starts it again from step 0:
    # said at the start, not found afterwards in a metrics.jsonl that was replaced.
    cfg = _run_config(base_config, tmp_path, **{"checkpoint.every_steps": 0})
    assert fresh_start_notice(cfg, None) is None  # nothing logged yet
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(3)))
    assert "holds 3 steps logged by an earlier start, but checkpoints are off" in fresh_start_notice(cfg, None)
    cfg = _run_config(base_config, tmp_path)
    assert "no complete checkpoint in" in fresh_start_notice(cfg, None)
    assert "run.resume is never" in fresh_start_notice(
        _run_config(base_config, tmp_path, **{"run.resume": "never"}), None
    )
    _write(cfg.checkpoints(), 2)
    assert fresh_start_notice(cfg, find_resume(cfg)) is None  # it continues: nothing is replaced


def test_resume_from_a_path_that_is_no_checkpoint_is_a_config_error(base_config, tmp_path):
    cfg = _run_config(base_config, tmp_path, **{"run.resume": str(tmp_path / "nowhere")})
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
    cfg = _run_config(base_config, tmp_path)
    plan = cfg.checkpoints()
    _write(plan, 2)
    newest = _write(plan, 4)
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
    assert find_resume(_run_config(base_config, tmp_path, **{"run.resume": str(newest.parent / "step-00000002")}))


def test_a_damaged_checkpoints_files_are_named_when_read_directly(tmp_path):
    plan = _plan(tmp_path)
    path = _write(plan, 3)
    (path / "controller.json").write_text("{")
    with pytest.raises(checkpoint.CheckpointIOError, match=r"controller\.json: damaged"):
        checkpoint.Resume(str(path), 3).controller_state()
    checkpoint.rng_file(path, 0).write_bytes(b"nonsense")
    with pytest.raises(checkpoint.CheckpointIOError, match=r"rank-00000\.pkl: damaged"):
        checkpoint.load_rng(path, 0)
    (path / "config.yaml").unlink()
    with pytest.raises(checkpoint.CheckpointIOError, match=r"config\.yaml: cannot be read \(No such file"):
        checkpoint.read_saved_config(path)
