"""Fixtures of the examples' tests: the synthetic GSM8K-format rows and a BPE chat tokenizer
trained on them (the gsm8k demo's chain, and the toy tokenizer, model and warm start it uses)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from examples.gsm8k import problems
from examples.toy.tiny_bpe import save_bpe_chat_tokenizer
from support.chat_data import SMALL


@pytest.fixture(scope="module")
def rows():
    return problems.generate(SMALL)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory, rows):
    out = tmp_path_factory.mktemp("bpe")
    texts = [r["question"] for r in rows["train"]] + [r["answer"] for r in rows["train"]]
    save_bpe_chat_tokenizer(out, texts, vocab_size=400)
    return out


@pytest.fixture(scope="module")
def tok(tok_dir):
    return AutoTokenizer.from_pretrained(tok_dir)  # loaded back, as every role loads it
