"""The LLM judge on a CUDA device (skipped without one): the GPU check.

Run on a machine with a GPU: ``python -m pytest tests/gpu -q``. A judge whose verdict is
known (``support.judges``: it reads the response's last digit) gives the same verdicts on the
rank's GPU with the torch engine (``device: auto``) and with vLLM (``engine: vllm``, bfloat16),
as on the CPU.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from roles.rewards.learned.base import ScoreItem, ScorerContext  # noqa: E402
from roles.rewards.learned.judge import Judge  # noqa: E402
from support.judges import build_lookup_judge  # noqa: E402

pytestmark = pytest.mark.timeout(300)

ALPHABET = "0123456789+=QA: x"
RESPONSES = ["12", "13", "4", "+", "1" * 200 + "6"]  # the last over the prompt limit: cut, still read
WANT = [(1.0, "1"), (0.0, "0"), (1.0, "1"), (None, "x"), (1.0, "1")]


def _parity(c: str) -> str:
    return ("0" if int(c) % 2 else "1") if c.isdigit() else "x"


def _item(response: str) -> ScoreItem:
    return ScoreItem(messages=[{"role": "user", "content": "3+4="}], prompt="3+4=", response=response, example=None)


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    return build_lookup_judge(tmp_path_factory.mktemp("judge") / "parity", ALPHABET, _parity)


@pytest.mark.parametrize(
    "options",
    [
        {"engine": "torch", "device": "auto", "dtype": "float32"},
        {"engine": "torch", "device": "cuda", "dtype": "bfloat16"},
        pytest.param(
            {"engine": "vllm", "dtype": "bfloat16", "gpu_memory_utilization": 0.2},
            marks=pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
        ),
    ],
    ids=["torch-float32", "torch-bfloat16", "vllm-bfloat16"],
)
def test_the_judge_gives_its_verdicts_on_the_gpu(judge_dir, options):
    common = {"template": "Q:{prompt} A:{response}", "parse": r"(\d)", "max_new_tokens": 1}
    config = Judge.Config.model_validate({"path": str(judge_dir), **common, **options})
    judge = Judge(config, ScorerContext(seed=0))
    try:
        if options["engine"] == "torch":
            assert judge.engine.device.type == "cuda"
        scores = judge.score_raw([_item(r) for r in RESPONSES])
    finally:
        judge.close()
    assert [(s.value, s.note) for s in scores] == WANT
    assert [s.extras["truncated"] for s in scores] == [0.0, 0.0, 0.0, 0.0, 1.0]
