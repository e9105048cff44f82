"""The GSM8K-format recipe end to end under mpirun (4 ranks, bounded in time).

Files on disk (Parquet for training, JSON Lines for eval), a byte-level BPE tokenizer with a
chat template, the gsm8k task and reward, evaluation rounds through the generators: the
whole real pipeline with nothing arithmetic-specific, on a cut-down warm start.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from examples.gsm8k import prepare as gsm8k
from examples.gsm8k.problems import ProblemConfig
from launch import recipe
from support.paths import REPO

CONFIG = REPO / "examples/gsm8k/async.yaml"
JOB_TIMEOUT_S = 600
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gsm8k")
    small = gsm8k.PrepareConfig(
        problems=ProblemConfig(train=400, test=40), sft=dataclasses.replace(gsm8k.PrepareConfig().sft, steps=60)
    )
    gsm8k.prepare(root, seed=0, config=small)
    return root


def test_gsm8k_recipe_trains_and_evaluates(tmp_path, prepared):
    out = tmp_path / "run"
    steps = 6
    overrides = {
        "model": {"path": str(prepared / "sft")},
        "task": {
            "train_files": [str(prepared / "data" / "train.parquet")],
            "eval_files": [str(prepared / "data" / "test.jsonl")],
        },
        "rollout": {"prompts_per_step": 8, "samples_per_prompt": 4},
        "eval": {"every_steps": 3, "before_training": True, "samples": 2},
        "run": {"steps": steps, "out": str(out), "progress": False},
    }
    cfg = recipe.write_config(CONFIG, out, overrides)
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True)

    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == list(range(steps))
    for m in metrics:
        # Only training groups reach the trainer: the eval rounds' groups never do.
        assert m["trainer"]["samples"] == 8 * 4
        assert set(m["reward_components"]) >= {"gsm8k", "gsm8k/correct", "gsm8k/extracted"}
        assert 0 <= m["correct_mean"] <= 1 and 0 <= m["response_clip_ratio"] <= 1
        assert 0 < m["response_length_mean"] <= m["response_length_max"] <= 48
        assert m["prompts_too_long"] == 0
    # The warm-started policy writes '#### N' answers: the reward extracts most of them.
    assert sum(m["reward_components"]["gsm8k/extracted"] for m in metrics) / steps > 0.5

    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert [e["policy_version"] for e in evals] == [0, 3, 6]  # before, every 3 steps, the final policy
    for e in evals:
        assert e["examples"] == 40 and 0 <= e["pass@1"] <= 1
        assert e["mean@2"] <= e["pass@2"] + 1e-9  # any-of-2 is at least the mean
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval_last"]["pass@1"] == evals[-1]["pass@1"] and summary["steps"] == steps
    assert summary["train_examples"] == 400 and summary["eval_examples"] == 40

    # The eval's greedy pass@1 of the final policy is what an offline greedy run of the saved
    # policy gets (same engine, same reward; batches differ, so allow a near-tie or two).
    offline = gsm8k.heldout_accuracy(out / "policy", prepared / "data", seed=0)
    assert offline == pytest.approx(evals[-1]["pass@1"], abs=2 / 40)
