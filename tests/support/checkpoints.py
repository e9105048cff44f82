"""Checkpoints written without a job: the controller's part and a stand-in for the trainers'
shard index, made visible as a run would (the checkpoint tests, and those of launch.resume)."""

from __future__ import annotations

import copy

from launch import config
from roles.checkpoint.plan import CheckpointPlan


def plan_at(tmp_path, text="x: 1\n", keep=2) -> CheckpointPlan:
    return CheckpointPlan(str(tmp_path / "ckpt"), keep, text)


def write_checkpoint(plan, steps, state=None):
    part = plan.write_controller_part(steps, state or {"position": {}, "next_eval_group": 0})
    (part / "trainer").mkdir(exist_ok=True)
    (part / "trainer" / ".metadata").write_bytes(b"the trainers' shard index (not read by these checks)")
    return plan.finalize(steps)


def run_config(base_config, tmp_path, **changes):
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
