import pytest
import torch

from examples.arith.tokens import ALPHABET, ArithTokens
from examples.toy.tiny_llama import TINY, build_tiny_llama


def test_sft_rows_put_loss_on_the_answer_only(task):
    from examples.arith.prepare import tokenize

    ids, mask, labels = tokenize(task, [task.prompt((3, 15)), task.prompt((1, 2))])
    assert ids[0].tolist() == [1, 6, 13, 4, 8, 14, 4, 11, 2]  # <bos>3+15=18<eos>
    assert labels[0].tolist() == [-100] * 6 + [4, 11, 2]
    assert ids[1].tolist() == [1, 4, 13, 5, 14, 6, 2, 0, 0]  # <bos>1+2=3<eos> then right padding
    assert labels[1].tolist() == [-100] * 5 + [6, 2, -100, -100]
    assert mask[1].tolist() == [1] * 7 + [0, 0]


def test_short_sft_runs_and_saves(tmp_path):
    """A cut-down warm start (the full one is calibrated offline): the loss falls, the result loads."""
    from transformers import AutoModelForCausalLM

    from examples.arith.prepare import sft_warm_start

    base = build_tiny_llama(tmp_path / "base", ALPHABET, **TINY.kwargs())
    task = ArithTokens(base)
    threads_before = torch.get_num_threads()
    out = sft_warm_start(base, task, out_dir=tmp_path / "sft", steps=30, lr=1e-3, batch=16, seed=0)
    assert out["pairs"] == 80
    assert torch.get_num_threads() == threads_before  # sft trains on 1 thread, then restores
    assert out["final_loss"] < 0.7 * out["first_loss"]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    assert task.heldout_accuracy(model) == pytest.approx(out["heldout_acc_after"])
