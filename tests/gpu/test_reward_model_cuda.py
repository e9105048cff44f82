"""The reward model on a CUDA device (skipped without one): the GPU check.

Run on a machine with a GPU: ``python -m pytest tests/gpu -q``. A reward model trained in the
test to prefer responses ending in an even digit (``support.reward_models``) scores on the
rank's GPU (``device: auto``) as on the CPU: float32 within 1e-4, bfloat16 with the same sign
on every response.
"""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from examples.arith.tokens import ALPHABET  # noqa: E402
from examples.toy.tiny_llama import save_char_tokenizer  # noqa: E402
from roles.rewards.learned.base import ScorerContext  # noqa: E402
from roles.rewards.learned.reward_model import RewardModel  # noqa: E402
from support.reward_models import parity_items, train_parity_reward_model  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rm")
    save_char_tokenizer(d / "tok", ALPHABET)
    return train_parity_reward_model(d / "rm", d / "tok", steps=300)


def test_the_reward_model_scores_on_the_gpu_as_on_the_cpu(rm_dir):
    items = [item for item, _ in parity_items(64, seed=11)]
    cpu = RewardModel(RewardModel.Config(path=str(rm_dir), device="cpu"), ScorerContext())
    gpu = RewardModel(RewardModel.Config(path=str(rm_dir)), ScorerContext(gpu_slot=0))
    assert gpu.device.type == "cuda"
    want = [r.value for r in cpu.score_raw(items)]
    assert [r.value for r in gpu.score_raw(items)] == pytest.approx(want, abs=1e-4)
    bf16 = RewardModel(RewardModel.Config(path=str(rm_dir), dtype="bfloat16", tokens_per_batch=64), ScorerContext())
    got = [r.value for r in bf16.score_raw(items)]
    assert [g > 0 for g in got] == [w > 0 for w in want]
