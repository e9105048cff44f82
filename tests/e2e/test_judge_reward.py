"""An LLM judge as the reward of a real job (4 ranks under mpirun, CPU): the arith demo for a
few steps, scored by tiny judges whose verdicts are known (``support.judges``).

One judge reads the response's last digit (1 for even, 0 for odd) and is the reward; beside
it, with weight 0, one that never stops (cut at max_new_tokens, a parse failure every time)
and one that raises on every call (its template holds a character its tokenizer cannot
encode). The job must end normally, log each judge under its label with its failures
counted, and show the judge's verdict under ``notes`` in samples.jsonl. The judges run in the
torch engine (on the CPU here) and, where it is installed, in vLLM.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from launch import recipe
from support.jobs import CONFIG, JOB_TIMEOUT_S
from support.judges import build_lookup_judge
from support.paths import REPO

pytestmark = pytest.mark.timeout(900)

ALPHABET = "0123456789+=QA: x"  # the arith policy's characters, the template's and the verdicts'
PROMPTS, SAMPLES, STEPS, SHOWN = 4, 4, 3, 6


def _parity(c: str) -> str:
    return ("0" if int(c) % 2 else "1") if c.isdigit() else "x"


def _judges(root, engine: str) -> list[dict]:
    parity = build_lookup_judge(root / "parity", ALPHABET, _parity)
    stuck = build_lookup_judge(root / "stuck", ALPHABET, lambda c: "x")
    common = {"name": "judge", "engine": engine, "template": "Q:{prompt} A:{response}", "parse": r"(\d)"}
    return [
        {**common, "label": "parity", "path": str(parity), "max_new_tokens": 1},
        {**common, "label": "stuck", "path": str(stuck), "max_new_tokens": 6, "weight": 0.0},
        {**common, "label": "broken", "path": str(stuck), "template": "?{response}", "weight": 0.0},
    ]


@pytest.mark.parametrize(
    "engine",
    [
        "torch",
        pytest.param(
            "vllm", marks=pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
        ),
    ],
)
def test_a_judge_scores_a_job_and_its_verdicts_are_shown(tmp_path, sft_model, engine):
    out = tmp_path / "run"
    overrides = {
        "model": {"path": str(sft_model)},
        "run": {"out": str(out), "progress": False, "steps": STEPS},
        "rollout": {"prompts_per_step": PROMPTS, "samples_per_prompt": SAMPLES},
        "logging": {"samples_per_step": SHOWN},
        "reward": _judges(tmp_path / "judges", engine),
    }
    cfg = recipe.write_config(CONFIG, out, recipe.merge_overrides({}, overrides))
    pythonpath = os.pathsep.join([str(REPO / "tests"), str(REPO)])
    recipe.run_job(cfg, timeout_s=JOB_TIMEOUT_S, quiet=True, extra_env={"PYTHONPATH": pythonpath})

    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == list(range(STEPS))
    for m in metrics:
        parts = m["reward_components"]
        assert 0.0 <= parts["parity"] <= 1.0 and m["reward_mean"] == pytest.approx(parts["parity"])
        # Every sample: the stuck judge's verdict never parses, the broken judge's call raises.
        assert parts["stuck/parse_failed"] == 1.0 and parts["broken/failed"] == 1.0
        assert m["verifier_failures"] >= 2 * PROMPTS * SAMPLES

    shown = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(shown) == STEPS * SHOWN
    for record in shown:
        response, notes = record["response"], record["notes"]
        want = _parity(response[-1]) if response else "x"
        assert notes["parity"] == want, record  # the judge read this response, and said so
        assert record["reward"] == (float(want) if want != "x" else 0.0), record
        assert record["components"]["parity/parse_failed"] == float(want == "x")
        assert notes["stuck"] == "x" * 6 and "broken" not in notes
