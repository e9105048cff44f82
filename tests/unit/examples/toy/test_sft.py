"""The generic SFT core, on a small Llama over the BPE chat tokenizer (``tok``)."""

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from examples.toy.tiny_bpe import CHAT_TEMPLATE
from support.chat_data import TINY_SIZE


def test_generic_sft_puts_loss_on_targets_and_calls_evaluate(tmp_path, tok):
    from examples.toy.sft import SFTConfig, _pad_rows, sft_train
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer

    rows = [
        (np.array([5, 6, 7], np.int32), np.array([8, 2], np.int32)),
        (np.array([5, 9], np.int32), np.array([10, 11, 2], np.int32)),
    ]
    ids, mask, labels = _pad_rows(rows, pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 2], [5, 9, 10, 11, 2]]
    assert labels.tolist() == [[-100, -100, -100, 8, 2], [-100, -100, 10, 11, 2]]

    base = build_tiny_llama_for_tokenizer(tmp_path / "base", tok, seed=0, **TINY_SIZE)
    calls = []

    def evaluate(model) -> float:
        calls.append(model.training)
        return 0.5

    threads = torch.get_num_threads()
    report = sft_train(
        base,
        tok,
        rows * 4,
        tmp_path / "sft",
        evaluate,
        SFTConfig(fraction=1.0, steps=30, lr=3e-3, batch=4, schedule="cosine"),
    )
    assert torch.get_num_threads() == threads
    assert report["pairs"] == 8 and report["heldout_acc_before"] == report["heldout_acc_after"] == 0.5
    assert len(calls) == 2 and not calls[1]  # evaluated after training in eval mode
    assert report["final_loss"] < 0.5 * report["first_loss"]
    assert AutoTokenizer.from_pretrained(tmp_path / "sft").chat_template == CHAT_TEMPLATE
    with pytest.raises(ValueError, match="schedule"):
        sft_train(base, tok, rows, tmp_path / "x", None, SFTConfig(steps=1, schedule="linear"))
    with pytest.raises(ValueError, match="leaves none"):
        sft_train(base, tok, rows, tmp_path / "x", None, SFTConfig(steps=1, fraction=0.1))


def test_sft_pads_with_eos_when_the_tokenizer_has_no_pad_token(tmp_path, tok):
    """GPT-2's and Llama's tokenizers name no pad token: int(None) stopped SFT at its start."""
    import copy

    from examples.toy.sft import SFTConfig, sft_train
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer

    no_pad = copy.deepcopy(tok)
    no_pad.pad_token = None
    assert no_pad.pad_token_id is None and no_pad.eos_token_id is not None
    rows = [
        (np.array([5, 6, 7], np.int32), np.array([8, 2], np.int32)),
        (np.array([5], np.int32), np.array([2], np.int32)),
    ]
    base = build_tiny_llama_for_tokenizer(tmp_path / "base", tok, seed=0, **TINY_SIZE)
    report = sft_train(base, no_pad, rows, tmp_path / "sft", None, SFTConfig(fraction=1.0, steps=2, batch=2))
    assert report["pairs"] == 2 and np.isfinite(report["final_loss"])


def test_micro_batches_by_length_give_the_full_batchs_gradient(tmp_path, tok):
    """``micro_batches`` pads rows to their own kind of length, not to the batch's longest: the
    token-weighted sum of the micro-batches' gradients is the whole batch's."""
    from transformers import AutoModelForCausalLM

    from examples.toy.sft import _backward, _pad_rows
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer

    rng = np.random.default_rng(0)
    rows = [
        (rng.integers(3, 50, rng.integers(1, 4)).astype(np.int32), rng.integers(3, 50, n).astype(np.int32))
        for n in (1, 2, 30, 3, 12, 1, 40)
    ]
    ids, _, labels = _pad_rows(rows, pad_id=0)
    base = build_tiny_llama_for_tokenizer(tmp_path / "base", tok, seed=0, **TINY_SIZE)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    grads, losses = [], []
    for micro_batches in (1, 3):
        model.zero_grad(set_to_none=True)
        losses.append(float(_backward(model, ids, labels, micro_batches)))
        grads.append([p.grad.clone() for p in model.parameters()])
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    for whole, parts in zip(*grads):
        torch.testing.assert_close(parts, whole, rtol=1e-4, atol=1e-6)
