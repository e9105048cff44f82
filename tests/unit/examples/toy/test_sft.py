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
